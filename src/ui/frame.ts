import { rowsFor } from './layout.js';

const HIDE_CURSOR = '\x1b[?25l';
const SHOW_CURSOR = '\x1b[?25h';
const ERASE_LINE = '\x1b[2K';

/**
 * A block of lines redrawn in place at the bottom of a terminal, erasing exactly what it drew. Rows are counted at the current width:
 * after a shrink, reflowing terminals (tmux, VTE, iTerm2, Windows Terminal) have rewrapped them, and the old count would leave rows behind.
 */
export class LiveFrame {
  private drawn: readonly string[] = [];
  /** The width the frame was drawn at: a new width means a redraw even if the lines are the same. */
  private columns: number;

  constructor(private readonly stream: NodeJS.WritableStream & { columns?: number }) {
    this.columns = stream.columns || 80;
  }

  get active(): boolean {
    return this.drawn.length > 0;
  }

  /** The sequence erasing the frame's rows bottom to top, cursor left at its first. Never "to end of screen": tmux takes that, from the top row, for a clear and scrolls everything back. */
  private erase(): string {
    if (this.drawn.length === 0) return '';
    const width = this.stream.columns || 80;
    const rows = this.drawn.reduce((n, line) => n + rowsFor(line.length, width), 0);
    return `\r${ERASE_LINE}${`\x1b[1A${ERASE_LINE}`.repeat(rows - 1)}`;
  }

  draw(lines: readonly string[], force = false): void {
    const width = this.stream.columns || 80;
    if (!force && width === this.columns && lines.length === this.drawn.length && lines.every((l, i) => l === this.drawn[i])) return;
    const start = this.drawn.length === 0 ? HIDE_CURSOR : this.erase();
    this.columns = width;
    this.stream.write(`${start}${lines.join('\n')}`);
    this.drawn = lines;
  }

  /** Writes `text` (whole lines) where the frame was, then the frame again below it. */
  printAbove(text: string): void {
    if (this.drawn.length === 0) {
      this.stream.write(`${text}\n`);
      return;
    }
    const lines = this.drawn;
    this.stream.write(`${this.erase()}${text}\n`);
    this.drawn = [];
    this.draw(lines, true);
  }

  clear(): void {
    if (this.drawn.length === 0) return;
    this.stream.write(`${this.erase()}${SHOW_CURSOR}`);
    this.drawn = [];
  }
}
