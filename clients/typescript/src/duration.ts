// Go duration strings, as the bot API writes them ("10s", "1h0m0s", "1m30s", "500ms").

const unitMs: Record<string, number> = {
  ns: 1e-6,
  us: 1e-3,
  "\u00b5s": 1e-3, // µs (micro sign)
  "\u03bcs": 1e-3, // μs (Greek mu)
  ms: 1,
  s: 1000,
  m: 60_000,
  h: 3_600_000,
};

const whole = /^[-+]?(?:(?:\d+(?:\.\d*)?|\.\d+)(?:ns|us|\u00b5s|\u03bcs|ms|s|m|h))+$/;
const part = /(\d+(?:\.\d*)?|\.\d+)(ns|us|\u00b5s|\u03bcs|ms|s|m|h)/g;

/**
 * Parses a Go duration string ("10s", "1h0m0s", "1.5m", "300ms", "0") into milliseconds, as Go's
 * time.ParseDuration does. Throws a RangeError for anything else.
 */
export function parseDuration(s: string): number {
  if (s === "0" || s === "+0" || s === "-0") {
    return 0;
  }
  if (!whole.test(s)) {
    throw new RangeError(`not a Go duration: ${JSON.stringify(s)}`);
  }
  let ms = 0;
  for (const m of s.matchAll(part)) {
    ms += Number(m[1]) * (unitMs[m[2] as string] as number);
  }
  return s.startsWith("-") ? -ms : ms;
}

/** Writes a whole number of milliseconds as a Go duration string: "30s", or "1500ms". */
export function formatDuration(ms: number): string {
  const whole = Math.round(ms);
  return whole % 1000 === 0 ? `${whole / 1000}s` : `${whole}ms`;
}
