import { useState } from "preact/hooks";
import { asProblem, fieldErrors, type Problem } from "./problem";

// attempt runs one action of a screen (a form sent, the request a button
// makes): busy while it runs, the problem of its last try cleared first,
// and its failure shown as a problem.
export async function attempt(
  fn: () => unknown,
  setBusy: (busy: boolean) => void,
  setProblem: (p: Problem | null) => void,
): Promise<void> {
  setBusy(true);
  setProblem(null);
  try {
    await fn();
  } catch (err) {
    setProblem(asProblem(err));
  } finally {
    setBusy(false);
  }
}

// useAction keeps the state of a screen's action: whether it runs, and
// why it failed (errs: the field errors, for the form's fields). run(fn)
// runs it (see attempt); handleSubmit(fn) is a form's submit handler that runs
// it.
export function useAction() {
  const [problem, setProblem] = useState<Problem | null>(null);
  const [busy, setBusy] = useState(false);
  const run = (fn: () => unknown) => attempt(fn, setBusy, setProblem);
  return {
    problem,
    setProblem,
    busy,
    errs: fieldErrors(problem),
    run,
    handleSubmit: (fn: (e: Event) => unknown) => (e: Event) => {
      e.preventDefault();
      return run(() => fn(e));
    },
  };
}
