// ESLint: typescript-eslint's type-checked rules over the TypeScript sources (docs/architecture.md, "How we check").
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['dist/**', 'node_modules/**', 'shim/**', '**/*.js', '**/*.mjs'] },
  js.configs.recommended,
  ...tseslint.configs.recommendedTypeChecked,
  {
    languageOptions: { parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname } },
    // A disable comment that no longer silences anything is itself a finding: disables stay few and explained.
    linterOptions: { reportUnusedDisableDirectives: 'error' },
    rules: {
      // node:test's describe and it return promises the runner itself awaits.
      '@typescript-eslint/no-floating-promises': [
        'error',
        { allowForKnownSafeCalls: [{ from: 'package', package: 'node:test', name: ['describe', 'it', 'test', 'suite'] }] },
      ],
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_', caughtErrors: 'none' }],
      '@typescript-eslint/consistent-type-imports': ['error', { fixStyle: 'inline-type-imports' }],
    },
  },
  {
    files: ['test/**/*.ts'],
    rules: {
      // Tests' fakes implement the daemon's async ports with synchronous bodies (`async () => records`), and a test
      // body may be async only to match its neighbours; an await there would add nothing but noise.
      '@typescript-eslint/require-await': 'off',
    },
  },
);
