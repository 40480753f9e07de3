/**
 * The revision of what a scan makes of the same input bytes (how csv-reader.ts splits rows, what
 * normaliseDomain in normalise.ts makes of a value), part of a cached scan's key: it moves on with
 * any such change, so a scan made under the old rules is not used. Its own module, so a rerun
 * served from the cached scan does not load the Public Suffix List.
 *
 * 2: a value with a control character in it (two domains in one cell) is not a domain; a row
 *    may end with CRLF, LF or CR whatever the first line ends with; every byte is checked for
 *    UTF-8, not only the first 64 KiB.
 */
export const SCAN_RULES = 2;
