import type { ComponentType } from "preact";
import { useEffect, useState } from "preact/hooks";
import { Loading } from "./ui";

// lazy loads a screen's code the first time it is shown, so that the
// first page does not wait for what other screens need (the charts).
export function lazy<P extends object>(load: () => Promise<ComponentType<P>>, what: string): ComponentType<P> {
  let loaded: ComponentType<P> | null = null;
  return function Lazy(props: P) {
    const [C, setC] = useState<ComponentType<P> | null>(() => loaded);
    useEffect(() => {
      if (!C)
        void load().then((c) => {
          loaded = c;
          setC(() => c);
        });
    }, []);
    return C ? <C {...props} /> : <Loading what={what} />;
  };
}
