/**
 * The revision of what a scan makes of the same bytes (csv-reader.ts's rows, normaliseDomain's values), part of a cached scan's key:
 * bump it with any such change. Its own module, so a rerun served from the cache does not load the Public Suffix List.
 */
export const SCAN_RULES = 2;
