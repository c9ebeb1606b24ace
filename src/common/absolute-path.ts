/** A path in a config: absolute, or refused in the same words wherever it is checked. */
import { z } from 'zod';

export const absolutePath = (): z.ZodString => z.string().startsWith('/', 'must be an absolute path');
