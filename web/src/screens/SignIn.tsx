import { useRef, useState } from "preact/hooks";
import { api, ok } from "../api/client";
import { Field, ProblemBox } from "../components/ui";
import { setTokens } from "../lib/auth";
import { useAction } from "../lib/action";
import { asProblem } from "../lib/problem";
import { navigate, safeNext } from "../lib/router";
import { useTitle } from "../lib/title";
import { CodeField, useTwoSteps } from "./twostep";

// SignIn is the two steps of signing in: e-mail and password, then the
// six-digit code of the authenticator app. Afterwards it returns to the
// page the user was on.
export function SignIn({ next }: { next: string | null }) {
  useTitle("Sign in");
  const { step, setStep, password, code, toCode, toPassword, retryCode } = useTwoSteps();
  const [challenge, setChallenge] = useState("");
  const { problem, setProblem, busy, errs, handleSubmit } = useAction();
  // The address of the last password step, kept for the next one.
  const [lastEmail, setLastEmail] = useState("");
  const email = useRef<HTMLInputElement>(null);

  const submitPassword = handleSubmit(async () => {
    const address = email.current!.value;
    const res = await ok(api.POST("/api/v1/auth/login", { body: { email: address, password: password.current!.value } }));
    setLastEmail(address);
    setChallenge(res.challenge_id);
    toCode();
  });

  const submitCode = handleSubmit(async () => {
    try {
      const res = await ok(
        api.POST("/api/v1/auth/2fa/verify", { body: { challenge_id: challenge, code: code.current!.value.trim() } }),
      );
      setTokens(res);
      navigate(safeNext(next), true);
    } catch (err) {
      const p = asProblem(err);
      setProblem(p);
      if (p.type?.endsWith("/invalid-challenge")) {
        // An expired or used-up challenge needs the password again; the
        // e-mail address stays.
        setChallenge("");
        toPassword();
      } else {
        // A wrong or reused code: another try with the same challenge.
        retryCode();
      }
    }
  });

  return (
    <main class="signin" id="main">
      <h1>Sign in to Capstan</h1>
      {step === "password" ? (
        <form key="password" onSubmit={submitPassword} aria-label="Sign in" noValidate>
          <ProblemBox problem={problem} fields={["email", "password"]} />
          <Field label="E-mail" name="email" errors={errs.email}>
            <input ref={email} id="email" name="email" type="email" autoComplete="username" required autoFocus
              defaultValue={lastEmail} aria-invalid={errs.email ? true : undefined} />
          </Field>
          <Field label="Password" name="password" errors={errs.password}>
            <input ref={password} id="password" name="password" type="password" autoComplete="current-password" required
              aria-invalid={errs.password ? true : undefined} />
          </Field>
          <button type="submit" class="primary" disabled={busy}>
            Continue
          </button>
        </form>
      ) : (
        <form key="code" onSubmit={submitCode} aria-label="Two-factor code" noValidate>
          <ProblemBox problem={problem} fields={["code", "challenge_id"]} />
          <CodeField input={code} errors={errs.code} hint="Six digits; a code works once." />
          <div class="row">
            <button type="submit" class="primary" disabled={busy}>
              Sign in
            </button>
            <button type="button" onClick={() => { setStep("password"); setChallenge(""); setProblem(null); }}>
              Back
            </button>
          </div>
        </form>
      )}
      <details class="first-user">
        <summary>No account yet?</summary>
        <p>
          The first administrator is created on the control plane's host. Create it there, scan the QR code it prints
          with an authenticator app, then sign in here:
        </p>
        <pre>capstan user create --data-dir ./data --email you@example.com --admin --password-stdin</pre>
        <p>
          Further users are invited by an administrator from the Users screen; the invitation link opens a page here to
          choose a password.
        </p>
      </details>
    </main>
  );
}
