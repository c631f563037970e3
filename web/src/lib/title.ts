import { useEffect } from "preact/hooks";

// titleOf is a page's document title: its parts, most specific first,
// then the product: "web-1 · Servers · Capstan". Missing parts (a name
// not loaded yet) are left out.
export function titleOf(...parts: (string | null | undefined | false)[]): string {
  return [...parts.filter((p): p is string => !!p && p.trim() !== ""), "Capstan"].join(" · ");
}

// useTitle sets the document title while the screen is shown; a screen
// passes the name of what it shows once loaded: useTitle(srv?.name,
// "Servers").
export function useTitle(...parts: (string | null | undefined | false)[]) {
  const title = titleOf(...parts);
  useEffect(() => {
    document.title = title;
  }, [title]);
}
