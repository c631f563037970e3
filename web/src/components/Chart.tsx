import { useEffect, useRef } from "preact/hooks";
import uPlot from "uplot";
import "uplot/dist/uPlot.min.css";

export interface ChartSeries {
  label: string;
  values: (number | null)[];
  unit?: string;
}

// Chart draws time series on a canvas with uPlot. times are in seconds.
export function Chart({ title, times, series, max }: { title: string; times: number[]; series: ChartSeries[]; max?: number }) {
  const box = useRef<HTMLDivElement>(null);
  useEffect(() => {
    const el = box.current!;
    const css = getComputedStyle(document.documentElement);
    const colors = [css.getPropertyValue("--accent").trim() || "#1d4ed8", css.getPropertyValue("--warn").trim() || "#a16207",
      css.getPropertyValue("--ok").trim() || "#15803d"];
    const axis = { stroke: css.getPropertyValue("--muted").trim(), grid: { stroke: css.getPropertyValue("--line").trim(), width: 1 } };
    const opts: uPlot.Options = {
      width: Math.max(280, el.clientWidth),
      height: 180,
      series: [{}, ...series.map((s, i) => ({ label: s.label, stroke: colors[i % colors.length], width: 1.5,
        value: (_u: uPlot, v: number | null) => (v == null ? "–" : `${v.toFixed(1)}${s.unit ?? ""}`) }))],
      axes: [axis, { ...axis, size: 50 }],
      scales: max ? { y: { range: [0, max] } } : {},
      legend: { live: true },
    };
    const plot = new uPlot(opts, [times, ...series.map((s) => s.values)] as uPlot.AlignedData, el);
    const ro = new ResizeObserver(() => plot.setSize({ width: Math.max(280, el.clientWidth), height: 180 }));
    ro.observe(el);
    return () => {
      ro.disconnect();
      plot.destroy();
    };
  }, [times, series, max]);
  return (
    <figure class="card">
      <figcaption>
        <strong>{title}</strong>
      </figcaption>
      <div ref={box} class="chart" role="img" aria-label={`${title} chart`} />
    </figure>
  );
}
