/**
 * The revision of normaliseDomain's rules (normalise.ts), part of a cached scan's key: it moves on
 * whenever a value may normalise differently, so a scan made under the old rules is not used.
 * Its own module, so a rerun served from the cached scan does not load the Public Suffix List.
 *
 * 2: a value with a control character in it (two domains in one cell) is not a domain.
 */
export const NORMALISATION_RULES = 2;
