import { Link } from "../components/ui";

export function NotFound({ what }: { what: string }) {
  return (
    <section>
      <h1>Not found</h1>
      <p>
        There is nothing at <code>{what}</code>. <Link href="/">Back to the servers</Link>
      </p>
    </section>
  );
}
