import { useEffect, useRef, useState } from "preact/hooks";
import { keyAction, shortcuts, typing } from "../lib/keys";
import { navigate } from "../lib/router";

// focusSearch focuses the search of the screen shown: the field marked
// data-search, else the first search field in the main area.
function focusSearch(): boolean {
  const el = document.querySelector<HTMLElement>("main [data-search], main input[type=search]");
  if (!el) return false;
  el.focus();
  if (el instanceof HTMLInputElement) el.select();
  return true;
}

const showHelpEvent = "capstan:shortcuts";

// HelpButton opens the shortcuts' help, for those who do not know "?".
export function HelpButton() {
  return (
    <button type="button" class="help-button" aria-label="Keyboard shortcuts" title="Keyboard shortcuts (?)"
      onClick={() => dispatchEvent(new Event(showHelpEvent))}>
      ?
    </button>
  );
}

// Shortcuts listens for the console's keyboard shortcuts on every screen
// and shows their help on "?".
export function Shortcuts() {
  const [help, setHelp] = useState(false);
  useEffect(() => {
    let prev = "";
    let prevAt = 0;
    const onKey = (e: KeyboardEvent) => {
      const t = e.target as HTMLElement;
      if (e.key === "Escape" && t instanceof HTMLInputElement && t.type === "search") {
        t.blur();
        return;
      }
      const before = Date.now() - prevAt < 1500 ? prev : "";
      const a = keyAction(e.key, before, { ctrl: e.ctrlKey, alt: e.altKey, meta: e.metaKey }, typing(t.tagName, t.isContentEditable));
      prev = a?.kind === "prefix" ? e.key : "";
      prevAt = Date.now();
      if (!a || document.querySelector("dialog[open]:not(.help)")) return;
      if (a.kind === "search") {
        if (focusSearch()) e.preventDefault();
      } else if (a.kind === "help") {
        e.preventDefault();
        setHelp(true);
      } else if (a.kind === "go") {
        e.preventDefault();
        navigate(a.path);
      }
    };
    const open = () => setHelp(true);
    addEventListener("keydown", onKey);
    addEventListener(showHelpEvent, open);
    return () => {
      removeEventListener("keydown", onKey);
      removeEventListener(showHelpEvent, open);
    };
  }, []);
  return help ? <Help onClose={() => setHelp(false)} /> : null;
}

function Help({ onClose }: { onClose: () => void }) {
  const ref = useRef<HTMLDialogElement>(null);
  useEffect(() => {
    ref.current?.showModal();
  }, []);
  return (
    <dialog ref={ref} class="help" aria-labelledby="help-title" onCancel={onClose} onClose={onClose}>
      <h2 id="help-title">Keyboard shortcuts</h2>
      <table>
        <tbody>
          {shortcuts.map((s) => (
            <tr key={s.keys}>
              <td>
                {s.keys.split(" ").map((k, i) => (
                  <span key={i}>
                    {i > 0 && " then "}
                    <kbd>{k}</kbd>
                  </span>
                ))}
              </td>
              <td>{s.does}</td>
            </tr>
          ))}
        </tbody>
      </table>
      <p class="muted">Shortcuts do nothing while you type in a field.</p>
      <div class="row end">
        <button type="button" onClick={onClose} autoFocus>
          Close
        </button>
      </div>
    </dialog>
  );
}
