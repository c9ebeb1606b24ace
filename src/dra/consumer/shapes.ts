/**
 * The API objects the consumer reads, validated at the edge into just the fields it uses: a pod's claims
 * (spec.resourceClaims, status.resourceClaimStatuses), a ResourceClaim's allocation and reservation, and the devices
 * of a driver's ResourceSlices with their attributes (resource.k8s.io/v1).
 */
import { z } from 'zod';

const Meta = z.object({ name: z.string(), namespace: z.string().optional(), uid: z.string().optional() });

export const PodSchema = z.object({
  metadata: Meta,
  spec: z
    .object({
      nodeName: z.string().optional(),
      resourceClaims: z
        .array(
          z.object({
            name: z.string(),
            resourceClaimName: z.string().nullish(),
            resourceClaimTemplateName: z.string().nullish(),
          }),
        )
        .nullish(),
    })
    .optional(),
  status: z
    .object({
      /** One per template claim: the claim the controller made for the pod (unset when none was needed). */
      resourceClaimStatuses: z.array(z.object({ name: z.string(), resourceClaimName: z.string().nullish() })).nullish(),
    })
    .optional(),
});
export type ClaimingPod = z.infer<typeof PodSchema>;

export const ClaimSchema = z.object({
  metadata: Meta,
  status: z
    .object({
      allocation: z
        .object({
          devices: z
            .object({
              results: z
                .array(
                  z.object({
                    request: z.string(),
                    driver: z.string(),
                    pool: z.string(),
                    device: z.string(),
                  }),
                )
                .nullish(),
            })
            .nullish(),
        })
        .nullish(),
      reservedFor: z.array(z.object({ resource: z.string().optional(), name: z.string(), uid: z.string() })).nullish(),
    })
    .optional(),
});
export type AllocatedClaim = z.infer<typeof ClaimSchema>;

/** A DeviceAttribute: exactly one of string, int, bool, version; the consumer reads string ones only. */
const Attribute = z.object({ string: z.string().optional() });

export const SliceSchema = z.object({
  spec: z.object({
    driver: z.string(),
    pool: z.object({ name: z.string(), generation: z.number().int() }),
    devices: z.array(z.object({ name: z.string(), attributes: z.record(z.string(), Attribute).nullish() })).nullish(),
  }),
});
export type PublishedSlice = z.infer<typeof SliceSchema>;

export const SliceListSchema = z.object({ items: z.array(SliceSchema).nullish() });
