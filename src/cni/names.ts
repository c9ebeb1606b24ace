/**
 * libcni's rule for container IDs and network names (its ValidateContainerID and ValidateNetworkName): what a runtime
 * may send as CNI_CONTAINERID, and the names libcni builds its cache files from. No name it accepts can leave a
 * directory it is joined to.
 */
export const CNI_NAME_RE = /^[a-zA-Z0-9][a-zA-Z0-9_.-]*$/;

/** Why libcni would refuse `name` as a container ID or a network name, or undefined when it is fine. */
export function cniNameProblem(name: string): string | undefined {
  if (name === '') return 'is empty';
  if (!CNI_NAME_RE.test(name))
    return 'may hold only letters, digits, "_", "." and "-", starting with a letter or digit';
  return undefined;
}
