import { Link } from "../components/ui";
import { useTitle } from "../lib/title";

export function NotFound({ what }: { what: string }) {
  useTitle("Not found");
  return (
    <section>
      <h1>Not found</h1>
      <p>
        There is nothing at <code>{what}</code>. <Link href="/">Back to the servers</Link>
      </p>
    </section>
  );
}
