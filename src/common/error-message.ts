/** The message of anything thrown: an Error's own, else the value as a string (a thrown string says itself). */
export const errorMessage = (thrown: unknown): string => (thrown instanceof Error ? thrown.message : String(thrown));
