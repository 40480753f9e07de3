/**
 * A small terminal model: feeds the bytes a program wrote to a PTY and returns what the screen
 * shows at the end. It knows what ora and cli-progress emit (carriage return, line feed, cursor
 * up/down/column, erase line and erase below); colours and cursor visibility are ignored.
 */
export function finalScreen(output: string, columns = 120): string[] {
  const lines: string[][] = [[]];
  let row = 0;
  let col = 0;
  const line = (): string[] => (lines[row] ??= []);
  for (let i = 0; i < output.length; i++) {
    const ch = output[i] as string;
    if (ch === '\x1b' && output[i + 1] !== '[') {
      i++; // a two-byte escape (save/restore cursor and the like): nothing on screen
      continue;
    }
    if (ch === '\x1b') {
      // eslint-disable-next-line no-control-regex -- a terminal model parses control characters
      const m = /^\x1b\[([?0-9;]*)([A-Za-z])/.exec(output.slice(i));
      if (m === null) continue;
      i += m[0].length - 1;
      const arg = m[1] ?? '';
      const n = arg === '' || arg.startsWith('?') ? 1 : Number(arg.split(';')[0]);
      switch (m[2]) {
        case 'A':
          row = Math.max(0, row - n);
          break;
        case 'B':
          row += n;
          break;
        case 'C':
          col += n;
          break;
        case 'D':
          col = Math.max(0, col - n);
          break;
        case 'G':
          col = Math.max(0, n - 1);
          break;
        case 'K': {
          const l = line();
          if (arg === '' || arg === '0') l.length = Math.min(l.length, col);
          else if (arg === '1') for (let c = 0; c <= col && c < l.length; c++) l[c] = ' ';
          else l.length = 0;
          break;
        }
        case 'J':
          if (arg === '' || arg === '0') {
            line().length = Math.min(line().length, col);
            lines.length = row + 1;
          } else {
            lines.length = 0;
            row = 0;
            col = 0;
          }
          break;
        default:
          break; // m (colour), h/l (cursor visibility, wrapping): nothing on screen
      }
      continue;
    }
    if (ch === '\r') col = 0;
    else if (ch === '\n') {
      row++;
      col = 0;
    } else if (ch >= ' ' || ch === '\t') {
      if (col >= columns) {
        row++;
        col = 0;
      }
      const l = line();
      while (l.length < col) l.push(' ');
      l[col++] = ch;
    }
  }
  return lines.map((l) => (l ?? []).join('').trimEnd()).filter((l, i, all) => l !== '' || all.slice(i).some((x) => x !== ''));
}
