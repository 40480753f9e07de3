/** A point in a program's output where the terminal was resized. */
export interface Resize {
  /** Offset in the output string at which the new width applies. */
  at: number;
  columns: number;
}

/**
 * A small terminal model: feeds the bytes a program wrote to a PTY and returns what the screen
 * shows at the end. It knows what ora and the live display emit (carriage return, line feed,
 * cursor up/down/column, erase line and erase below); colours and cursor visibility are ignored.
 * Text that reaches the last column wraps onto the next row, and a resize rewraps (reflows) the
 * lines as tmux and VTE do, keeping the cursor on the character it was on.
 */
export function finalScreen(output: string, columns = 120, resizes: readonly Resize[] = []): string[] {
  const t = new Terminal(columns);
  const pending = [...resizes].sort((a, b) => a.at - b.at);
  for (let i = 0; i < output.length; i++) {
    while (pending.length > 0 && (pending[0] as Resize).at <= i) t.resize((pending.shift() as Resize).columns);
    i = t.feed(output, i);
  }
  return t.screen();
}

class Terminal {
  rows: string[][] = [[]];
  /** rows[i] continues on rows[i + 1] (autowrap), so a reflow joins them. */
  wrapped: boolean[] = [];
  row = 0;
  col = 0;
  constructor(private columns: number) {}

  private line(): string[] {
    return (this.rows[this.row] ??= []);
  }

  /** Handles the character (or escape sequence) at `i`; returns the index of its last byte. */
  feed(output: string, i: number): number {
    const ch = output[i] as string;
    if (ch === '\x1b' && output[i + 1] !== '[') return i + 1; // a two-byte escape: nothing on screen
    if (ch === '\x1b') {
      // eslint-disable-next-line no-control-regex -- a terminal model parses control characters
      const m = /^\x1b\[([?0-9;]*)([A-Za-z])/.exec(output.slice(i, i + 32));
      if (m === null) return i;
      this.csi(m[1] ?? '', m[2] as string);
      return i + m[0].length - 1;
    }
    if (ch === '\r') this.col = 0;
    else if (ch === '\n') {
      this.wrapped[this.row] = false;
      this.row++;
      this.col = 0;
    } else if (ch >= ' ' || ch === '\t') this.put(ch);
    return i;
  }

  private put(ch: string): void {
    if (this.col >= this.columns) {
      this.wrapped[this.row] = true;
      this.row++;
      this.col = 0;
    }
    const l = this.line();
    while (l.length < this.col) l.push(' ');
    l[this.col++] = ch;
  }

  private csi(arg: string, command: string): void {
    const n = arg === '' || arg.startsWith('?') ? 1 : Number(arg.split(';')[0]);
    switch (command) {
      case 'A':
        this.row = Math.max(0, this.row - n);
        break;
      case 'B':
        this.row += n;
        break;
      case 'C':
        this.col += n;
        break;
      case 'D':
        this.col = Math.max(0, this.col - n);
        break;
      case 'G':
        this.col = Math.max(0, n - 1);
        break;
      case 'K': {
        const l = this.line();
        if (arg === '' || arg === '0') l.length = Math.min(l.length, this.col);
        else if (arg === '1') for (let c = 0; c <= this.col && c < l.length; c++) l[c] = ' ';
        else l.length = 0;
        break;
      }
      case 'J':
        if (arg === '' || arg === '0') {
          this.line().length = Math.min(this.line().length, this.col);
          this.rows.length = this.row + 1;
          this.wrapped.length = this.row;
        } else {
          this.rows = [[]];
          this.wrapped = [];
          this.row = this.col = 0;
        }
        break;
      default:
        break; // m (colour), h/l (cursor visibility, wrapping): nothing on screen
    }
  }

  /** Rewraps every line at the new width; the cursor stays on the same character. */
  resize(columns: number): void {
    const logical: { text: string[]; cursor: number | null }[] = [];
    let current: { text: string[]; cursor: number | null } = { text: [], cursor: null };
    const rowCount = Math.max(this.rows.length, this.row + 1);
    for (let r = 0; r < rowCount; r++) {
      const cells = this.rows[r] ?? [];
      if (r === this.row) current.cursor = current.text.length + this.col;
      // A wrapped row is full to the old width: pad it so the join keeps column positions.
      current.text.push(...cells, ...(this.wrapped[r] === true ? Array<string>(Math.max(0, this.columns - cells.length)).fill(' ') : []));
      if (this.wrapped[r] !== true) {
        logical.push(current);
        current = { text: [], cursor: null };
      }
    }
    this.columns = columns;
    this.rows = [];
    this.wrapped = [];
    for (const l of logical) {
      const start = this.rows.length;
      const chunks = Math.max(1, Math.ceil(l.text.length / columns));
      for (let c = 0; c < chunks; c++) {
        this.rows.push(l.text.slice(c * columns, (c + 1) * columns));
        this.wrapped.push(c < chunks - 1);
      }
      if (l.cursor !== null) {
        const offset = Math.min(l.cursor, Math.max(0, l.text.length));
        // A cursor just past the last character of a full row stays on that row (pending wrap).
        const rowIn = offset > 0 && offset === l.text.length && offset % columns === 0 ? offset / columns - 1 : Math.floor(offset / columns);
        this.row = start + rowIn;
        this.col = offset - rowIn * columns;
      }
    }
  }

  screen(): string[] {
    const lines = this.rows.map((l) => (l ?? []).join('').trimEnd());
    return lines.filter((l, i, all) => l !== '' || all.slice(i).some((x) => x !== ''));
  }
}
