import { useEffect, useRef, useState } from "preact/hooks";
import { api, ok } from "../api/client";
import { CopyButton, Field, Loading, ProblemBox } from "../components/ui";
import { setTokens } from "../lib/auth";
import { useAction } from "../lib/action";
import { asProblem, fieldErrors } from "../lib/problem";
import { navigate } from "../lib/router";
import { useTitle } from "../lib/title";
import { CodeField, useTwoSteps } from "./twostep";

type Invitation = { email: string; admin: boolean; expires_at: string };
type Enrollment = { secret: string; uri: string; qr: string };

// AcceptInvite is the page an invitation link opens (/invite#<token>; the
// token stays in the fragment, which the browser never sends): it shows
// whom the invitation is for, takes a password, shows the new second
// factor once as a QR code and as text, and with a code of it creates the
// account and signs in.
export function AcceptInvite() {
  useTitle("Join Capstan");
  const token = decodeURIComponent(location.hash.replace(/^#/, ""));
  const [inv, setInv] = useState<Invitation | null>(null);
  const { problem, setProblem, busy, errs, run, handleSubmit } = useAction();
  const { step, setStep, password, code, toCode, toPassword, retryCode } = useTwoSteps();
  const [enrollment, setEnrollment] = useState<Enrollment | null>(null);
  const [pw, setPw] = useState("");
  const repeat = useRef<HTMLInputElement>(null);

  useEffect(() => {
    if (!token) {
      setProblem({ title: "This link holds no invitation", status: 0, detail: "Open the whole link from the invitation." });
      return;
    }
    ok(api.POST("/api/v1/auth/invitation", { body: { token } }))
      .then((r) => setInv(r))
      .catch((err) => setProblem(asProblem(err)));
  }, [token]);

  async function submitPassword(e: Event) {
    e.preventDefault();
    setProblem(null);
    const p = password.current!.value;
    if (p !== repeat.current!.value) {
      setProblem({ title: "The passwords differ", status: 0, detail: "",
        errors: [{ field: "repeat", message: "must be the same password again" }] });
      repeat.current!.focus();
      return;
    }
    await run(async () => {
      // One second factor per visit: going back to the password keeps it.
      if (!enrollment) {
        const r = await ok(api.POST("/api/v1/auth/invitation/enrollment", { body: { token } }));
        setEnrollment({ secret: r.totp_secret, uri: r.totp_uri, qr: r.totp_qr_svg });
      }
      setPw(p);
      toCode();
    });
  }

  const submitCode = handleSubmit(async () => {
    try {
      const res = await ok(
        api.POST("/api/v1/auth/invitation/accept", { body: { token, password: pw, code: code.current!.value.trim() } }),
      );
      setTokens(res);
      history.replaceState(null, "", "/");
      navigate("/", true);
    } catch (err) {
      const p = asProblem(err);
      setProblem(p);
      if (fieldErrors(p).password) toPassword();
      else retryCode();
    }
  });

  return (
    <main class="signin invite" id="main">
      <h1>Join Capstan</h1>
      {!inv && !problem && <Loading what="the invitation" />}
      {!inv && <ProblemBox problem={problem} />}
      {inv && (
        <p data-invitee={inv.email}>
          Invitation for <strong>{inv.email}</strong> as {inv.admin ? "an administrator" : "a member"}, until{" "}
          {new Date(inv.expires_at).toLocaleString()}.
        </p>
      )}
      {inv && step === "password" && (
        <form key="password" onSubmit={submitPassword} aria-label="Choose a password" noValidate>
          <ProblemBox problem={problem} fields={["password", "repeat"]} />
          <input type="hidden" name="username" autoComplete="username" value={inv.email} />
          <Field label="Password" name="password" errors={errs.password}
            hint="12 to 128 characters; not a commonly used password.">
            <input ref={password} id="password" name="password" type="password" autoComplete="new-password" required autoFocus
              defaultValue={pw} aria-invalid={errs.password ? true : undefined} />
          </Field>
          <Field label="The password again" name="repeat" errors={errs.repeat}>
            <input ref={repeat} id="repeat" name="repeat" type="password" autoComplete="new-password" required
              defaultValue={pw} aria-invalid={errs.repeat ? true : undefined} />
          </Field>
          <button type="submit" class="primary" disabled={busy}>
            Continue
          </button>
        </form>
      )}
      {inv && step === "code" && enrollment && (
        <form key="code" onSubmit={submitCode} aria-label="Set up the second factor" noValidate>
          <ProblemBox problem={problem} fields={["code"]} />
          <p>
            Scan the code with an authenticator app (or enter the secret by hand). It is shown only now: you need the app to sign
            in.
          </p>
          <img class="qr" src={"data:image/svg+xml;charset=utf-8," + encodeURIComponent(enrollment.qr)} width={200} height={200}
            alt="QR code of your second factor's secret" />
          <p>
            Secret: <code class="mono" data-totp-secret>{enrollment.secret}</code> <CopyButton text={enrollment.secret} label="Copy the secret" />
          </p>
          <CodeField input={code} errors={errs.code} hint="Six digits." />
          <div class="row">
            <button type="submit" class="primary" disabled={busy}>
              Create my account
            </button>
            <button type="button" onClick={() => { setStep("password"); setProblem(null); }}>
              Back
            </button>
          </div>
        </form>
      )}
    </main>
  );
}
