import type { InvalidReason } from './normalise.js';

/** Why a value is not a registrable domain, encoded in row references as -1 - k; apart from the scan, so writing results needs no parser. */
export const INVALID_REASONS: readonly InvalidReason[] = ['empty', 'not_a_domain', 'ip_address', 'public_suffix', 'unknown_suffix'];

export const invalidRef = (reason: InvalidReason): number => -1 - INVALID_REASONS.indexOf(reason);
export const invalidReasonOf = (ref: number): InvalidReason => INVALID_REASONS[-1 - ref] as InvalidReason;
