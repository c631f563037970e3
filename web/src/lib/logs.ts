// Filtering of log lines in the browser: by text and by priority.

export type LogLine = { at: string; priority: number; message: string; stream?: string };

// priorityNames are the syslog priorities, 0 (most urgent) to 7.
export const priorityNames = ["emerg", "alert", "crit", "err", "warning", "notice", "info", "debug"];

// filterLines keeps the lines of priority at most maxPriority (that
// urgent or more; null: every line) whose message holds every word of
// text, ignoring case.
export function filterLines<T extends LogLine>(lines: T[], text: string, maxPriority: number | null): T[] {
  const words = text.toLowerCase().split(/\s+/).filter(Boolean);
  return lines.filter(
    (l) => (maxPriority == null || l.priority <= maxPriority) && words.every((w) => l.message.toLowerCase().includes(w)),
  );
}

// lineText is one line as the log view shows it: time, priority and message.
export function lineText(l: LogLine, time: (at: string) => string = (at) => new Date(at).toLocaleTimeString()): string {
  return `${time(l.at)}  ${(priorityNames[l.priority] ?? String(l.priority)).padEnd(7)}  ${l.message}`;
}
