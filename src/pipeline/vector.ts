type IntArray = Uint8Array | Int32Array | Uint32Array | Float64Array;
type IntArrayConstructor = Uint8ArrayConstructor | Int32ArrayConstructor | Uint32ArrayConstructor | Float64ArrayConstructor;

/** A growable typed array of whole numbers: a million entries cost 1-8 MB, not a million boxed numbers (Float64Array holds offsets past 4 GB exactly). */
export class IntVector {
  private data: IntArray;
  private size = 0;

  constructor(
    private readonly Type: IntArrayConstructor,
    capacity = 1024,
  ) {
    this.data = new Type(capacity);
  }

  get length(): number {
    return this.size;
  }

  /** The entries as a typed array (a view: copy it to keep it past the next push). */
  view(): IntArray {
    return this.data.subarray(0, this.size);
  }

  /** A vector holding exactly these entries (the array is adopted, not copied). */
  static of(data: IntArray): IntVector {
    const v = new IntVector(data.constructor as IntArrayConstructor, 1);
    v.data = data;
    v.size = data.length;
    return v;
  }

  /** Makes room for `n` entries in all, at once (no doubling past what is needed). */
  reserve(n: number): void {
    if (n <= this.data.length) return;
    const next = new this.Type(Math.ceil(n));
    next.set(this.data.subarray(0, this.size));
    this.data = next;
  }

  push(value: number): void {
    if (this.size === this.data.length) {
      const next = new this.Type(this.data.length * 2);
      next.set(this.data);
      this.data = next;
    }
    this.data[this.size++] = value;
  }

  get(i: number): number {
    if (i < 0 || i >= this.size) throw new RangeError(`index ${i} out of range 0..${this.size - 1}`);
    return this.data[i] as number;
  }

  set(i: number, value: number): void {
    if (i < 0 || i >= this.size) throw new RangeError(`index ${i} out of range 0..${this.size - 1}`);
    this.data[i] = value;
  }
}
