/**
 * The service's text made safe where it lands: a spreadsheet cell starting with `=`, `+`, `-` or `@` is a live formula, and ESC or NUL
 * drive a terminal. As OWASP advises (CSV Injection), such cells get a leading quote. Only the service's text is touched, never the input's.
 */

/** C0 controls but tab and line feed, DEL, and the C1 controls (0x9b is a one-byte CSI). */
// eslint-disable-next-line no-control-regex
const CONTROLS = /[\x00-\x08\x0b-\x1f\x7f-\x9f]/g;
// eslint-disable-next-line no-control-regex
const HAS_CONTROL = /[\x00-\x08\x0b-\x1f\x7f-\x9f]/;

/** Starts a formula in a spreadsheet (tab and CR too, as OWASP lists: some parsers skip them). */
const FORMULA_START = new Set(['=', '+', '-', '@', '\t', '\r']);

export function stripControls(text: string): string {
  return HAS_CONTROL.test(text) ? text.replace(CONTROLS, '') : text;
}

/** For a CSV cell: controls stripped, then a leading formula character neutralised. */
export function neutraliseCell(text: string): string {
  const clean = stripControls(text);
  return FORMULA_START.has(clean.charAt(0)) ? `'${clean}` : clean;
}
