type IntArray = Uint8Array | Int32Array;
type IntArrayConstructor = Uint8ArrayConstructor | Int32ArrayConstructor;

/** A growable typed array: a million entries cost 1-4 MB instead of a million boxed numbers. */
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
