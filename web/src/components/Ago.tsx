import { useAgo } from "../lib/clock";

// Ago is a relative time ("12 s ago") that stays fresh: the shared clock
// renews it, with the full time on hover.
export function Ago({ at, prefix = "" }: { at: string | number | null | undefined; prefix?: string }) {
  const text = useAgo(at);
  const d = new Date(at ?? NaN);
  if (Number.isNaN(d.getTime())) return <>{prefix}{text}</>;
  return (
    <time dateTime={d.toISOString()} title={d.toLocaleString()}>
      {prefix}
      {text}
    </time>
  );
}
