// eventLines are the lines a job event carries in its data (a failed
// release's container log, a build's output), if any.
export function eventLines(data: unknown): string[] {
  if (!data || typeof data !== "object" || !("lines" in data)) return [];
  const lines = (data as { lines: unknown }).lines;
  return Array.isArray(lines) ? lines.filter((l): l is string => typeof l === "string") : [];
}
