import { priorityNames } from "../lib/logs";

/** The text and priority filters of a log view; the lines are filtered in the browser. */
export function LogFilter(props: { text: string; priority: string; onText: (v: string) => void; onPriority: (v: string) => void }) {
  return (
    <>
      <label>
        <span class="sr-only">Filter the lines</span>
        <input
          type="search"
          name="log-filter"
          placeholder="Filter lines"
          value={props.text}
          onInput={(e) => props.onText((e.target as HTMLInputElement).value)}
        />
      </label>
      <label>
        <span class="sr-only">Priority</span>
        <select name="log-priority" value={props.priority} onChange={(e) => props.onPriority((e.target as HTMLSelectElement).value)}>
          <option value="">Every priority</option>
          {priorityNames.map((n, i) => (
            <option key={n} value={String(i)}>
              {n} or more urgent
            </option>
          ))}
        </select>
      </label>
    </>
  );
}
