/** A PCI address in the kernel's form, domain:bus:slot.function (0000:3b:00.1), as sysfs and device plugins name it. */
export const PCI_ADDRESS = /^[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$/;
