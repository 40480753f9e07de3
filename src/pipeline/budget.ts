/**
 * --max-credits: a paid call may start only if, were it and every call still in flight to be
 * charged, this invocation would stay within the cap. Calls whose answer was lost count as
 * charged, since the service may have charged them.
 */
export class CreditBudget {
  private spent = 0;
  private reserved = 0;

  constructor(private readonly limit: number | null) {}

  reserve(): boolean {
    if (this.limit !== null && this.spent + this.reserved + 1 > this.limit) return false;
    this.reserved++;
    return true;
  }

  /** Ends a reservation with what the call cost (0 for a miss or a call never sent). */
  settle(charged: number): void {
    this.reserved = Math.max(0, this.reserved - 1);
    this.spent += charged;
  }
}
