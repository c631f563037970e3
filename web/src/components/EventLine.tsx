import type { components } from "../api/schema";
import { eventLines } from "../lib/events";

type JobEvent = components["schemas"]["Event"];

// EventLine is one event of a job: its time and message, and below it
// the lines its data carries, so that a failed release shows the log
// that explains it.
export function EventLine({ event }: { event: JobEvent }) {
  const lines = eventLines(event.data);
  return (
    <div class={"lvl-" + event.level}>
      <span class="muted">{new Date(event.at).toLocaleTimeString()}</span> {event.message}
      {lines.length > 0 && <pre class="event-lines">{lines.join("\n")}</pre>}
    </div>
  );
}
