// Problems are the API's errors (RFC 9457): a title, a detail, and for
// validation problems the fields at fault. The console shows the title and
// detail, and each field error next to its field.

export interface FieldError {
  field: string;
  message: string;
}

export interface Problem {
  type?: string;
  title: string;
  status: number;
  detail: string;
  errors?: FieldError[] | null;
  request_id?: string;
}

export class ProblemError extends Error {
  readonly problem: Problem;
  constructor(problem: Problem) {
    super(problem.detail || problem.title);
    this.problem = problem;
  }
}

// asProblem turns whatever a failed call gave into a problem to show.
export function asProblem(err: unknown, status = 0): Problem {
  if (err instanceof ProblemError) return err.problem;
  if (err && typeof err === "object" && "title" in err && "status" in err) {
    const p = err as Partial<Problem>;
    return {
      type: p.type,
      title: String(p.title ?? "Error"),
      status: Number(p.status ?? status),
      detail: String(p.detail ?? ""),
      errors: p.errors ?? null,
      request_id: p.request_id,
    };
  }
  if (err instanceof Error) return { title: "Request failed", status, detail: err.message };
  return { title: "Request failed", status, detail: String(err ?? "") };
}

// fieldErrors maps each field of a form to its messages. The API names
// body fields "body.name" or "name", list items "tags[0]"; both forms map
// to the form's field name ("name", "tags").
export function fieldErrors(p: Problem | null | undefined): Record<string, string[]> {
  const out: Record<string, string[]> = {};
  for (const e of p?.errors ?? []) (out[fieldName(e.field)] ??= []).push(e.message);
  return out;
}

export function fieldName(field: string): string {
  return field.replace(/^body\./, "").replace(/\[\d+\].*$/, "").replace(/\..*$/, "");
}

// unfielded returns the errors that name no field of the form, so that
// none is lost when a form shows errors only next to its own fields.
export function unfielded(p: Problem | null | undefined, fields: string[]): FieldError[] {
  const known = new Set(fields);
  return (p?.errors ?? []).filter((e) => !known.has(fieldName(e.field)));
}
