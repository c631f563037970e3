// window returns the rows of a virtualised list to render: those in view
// plus overscan rows either side, for a list of count rows of rowHeight
// pixels scrolled to scrollTop in a viewport of height pixels.
export function visibleRange(
  count: number,
  rowHeight: number,
  scrollTop: number,
  height: number,
  overscan = 8,
): { start: number; end: number } {
  if (count <= 0 || rowHeight <= 0) return { start: 0, end: 0 };
  const first = Math.floor(Math.max(0, scrollTop) / rowHeight);
  const inView = Math.ceil(Math.max(0, height) / rowHeight) + 1;
  const start = Math.max(0, Math.min(count, first - overscan));
  const end = Math.min(count, first + inView + overscan);
  return { start, end: Math.max(start, end) };
}
