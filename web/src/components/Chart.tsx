import { useEffect, useMemo, useRef, useState } from "preact/hooks";
import uPlot from "uplot";
import "uplot/dist/uPlot.min.css";
import { hoverTime, localOffset, timeLabel, timeTicks, valueAxis } from "../lib/chart";
import { figure, type Kind } from "../lib/format";

export interface ChartSeries {
  label: string;
  values: (number | null)[];
}

const HEIGHT = 180;

// pointTime is the time of the point under the pointer: the time of day,
// with the day when the chart spans more than one.
function pointTime(times: number[], i: number): string {
  const t = times[i];
  const long = times[times.length - 1] - times[0] > 86400;
  return long ? hoverTime(t, localOffset(t)) : timeLabel(t, 60, localOffset(t));
}

// The colours of a chart's lines, in the order of its series (styles.css
// sets them for light and dark).
const seriesVars = ["--series-1", "--series-2", "--series-3", "--series-4"];

// useScheme is the colour scheme, so that a chart redraws in the
// colours of a scheme the reader switches to.
function useScheme(): string {
  const q = typeof matchMedia === "function" ? matchMedia("(prefers-color-scheme: dark)") : null;
  const [dark, setDark] = useState(q?.matches ?? false);
  useEffect(() => {
    if (!q) return;
    const fn = () => setDark(q.matches);
    q.addEventListener("change", fn);
    return () => q.removeEventListener("change", fn);
  }, []);
  return dark ? "dark" : "light";
}

// Chart draws time series (times in seconds) on a canvas with uPlot: the
// value axis in one unit of kind, as many time labels as the width takes,
// and a legend that names the series and, while the pointer is on the
// chart, gives their values there. Every chart of the console looks alike.
export function Chart({ title, times, series, kind = "count", max }: {
  title: string;
  times: number[];
  series: ChartSeries[];
  kind?: Kind;
  max?: number;
}) {
  const box = useRef<HTMLDivElement>(null);
  const [idx, setIdx] = useState<number | null>(null);
  const scheme = useScheme();
  const axis = useMemo(() => {
    let top = 0;
    for (const s of series) for (const v of s.values) if (v != null && Number.isFinite(v) && v > top) top = v;
    return valueAxis(kind, top, HEIGHT, max);
  }, [series, kind, max]);

  useEffect(() => {
    const el = box.current!;
    const css = getComputedStyle(document.documentElement);
    const v = (name: string, or: string) => css.getPropertyValue(name).trim() || or;
    const lines = seriesVars.map((n) => v(n, "#2563eb"));
    const offset = localOffset(times[times.length - 1] ?? Date.now() / 1000);
    let step = 60;
    const look = { stroke: v("--muted", "#5b6470"), grid: { stroke: v("--line", "#dde1e6"), width: 1 }, ticks: { show: false },
      font: "12px system-ui, sans-serif" };
    const opts: uPlot.Options = {
      width: Math.max(240, el.clientWidth),
      height: HEIGHT,
      series: [{}, ...series.map((s, i) => ({
        label: s.label,
        stroke: lines[i % lines.length],
        width: 1.5,
        // A lone series is filled under its line, faintly.
        fill: series.length === 1 ? lines[0] + "22" : undefined,
        points: { show: false },
      }))],
      axes: [
        { ...look, size: 26,
          splits: (u: uPlot, _i: number, lo: number, hi: number) => {
            const r = timeTicks(lo, hi, u.bbox.width / uPlot.pxRatio, offset);
            step = r.step;
            return r.ticks;
          },
          values: (_u: uPlot, ticks: number[]) => ticks.map((t) => timeLabel(t, step, offset)) },
        { ...look, size: axis.width, splits: () => axis.ticks, values: () => axis.labels },
      ],
      scales: { x: { time: true }, y: { range: [0, axis.max] } },
      legend: { show: false },
      cursor: { points: { size: 6 } },
      hooks: { setCursor: [(u: uPlot) => setIdx(u.cursor.idx ?? null)] },
    };
    const plot = new uPlot(opts, [times, ...series.map((s) => s.values)] as uPlot.AlignedData, el);
    const leave = () => setIdx(null);
    el.addEventListener("mouseleave", leave);
    const ro = new ResizeObserver(() => plot.setSize({ width: Math.max(240, el.clientWidth), height: HEIGHT }));
    ro.observe(el);
    return () => {
      el.removeEventListener("mouseleave", leave);
      ro.disconnect();
      plot.destroy();
    };
  }, [times, series, axis, scheme]);

  const last = times.length - 1;
  const at = idx != null && idx >= 0 && idx <= last ? idx : null;
  const summary = series.map((s) => `${s.label} ${figure(kind, s.values[last])}`).join(", ");
  return (
    <figure class="card chart-card">
      <figcaption class="chart-head">
        <strong>{title}</strong>
        <span class="chart-legend" aria-hidden="true">
          {at != null && <span class="chart-at">{pointTime(times, at)}</span>}
          {series.map((s, i) => (
            <span key={s.label} class="chart-key">
              <i class={"k" + (i % seriesVars.length)} />
              {s.label}
              {at != null && <b>{figure(kind, s.values[at])}</b>}
            </span>
          ))}
        </span>
      </figcaption>
      <div ref={box} class="chart" role="img" aria-label={`${title} chart; latest: ${summary}`} />
    </figure>
  );
}
