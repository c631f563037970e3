import type { RefObject } from "preact";
import { useRef, useState } from "preact/hooks";
import { Field } from "../components/ui";

// useTwoSteps is a form in two steps, a password and then the six-digit
// code of an authenticator app, as signing in and accepting an invitation
// ask for them: the step shown, the two inputs, and moving between them
// with the input of the new step focused.
export function useTwoSteps() {
  const [step, setStep] = useState<"password" | "code">("password");
  const password = useRef<HTMLInputElement>(null);
  const code = useRef<HTMLInputElement>(null);
  return {
    step,
    setStep,
    password,
    code,
    toCode() {
      setStep("code");
      queueMicrotask(() => code.current?.focus());
    },
    toPassword() {
      setStep("password");
      queueMicrotask(() => password.current?.focus());
    },
    // retryCode empties the code for another try.
    retryCode() {
      if (!code.current) return;
      code.current.value = "";
      code.current.focus();
    },
  };
}

// CodeField is the input of the authenticator app's code.
export function CodeField({ input, errors, hint }: { input: RefObject<HTMLInputElement>; errors?: string[]; hint: string }) {
  return (
    <Field label="Code from your authenticator app" name="code" errors={errors} hint={hint}>
      <input ref={input} id="code" name="code" inputMode="numeric" autoComplete="one-time-code" pattern="[0-9]{6}"
        maxLength={6} required aria-invalid={errors ? true : undefined} />
    </Field>
  );
}
