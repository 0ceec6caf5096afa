/** CPU time of processes from /proc (Linux): what a bench case cost, not only how long it took. */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

const TICKS_PER_SECOND = 100;

interface Stat {
  ppid: number;
  /** utime + stime, in seconds. */
  self: number;
  /** cutime + cstime: reaped children, in seconds. */
  children: number;
}

function stat(pid: number): Stat | undefined {
  try {
    const text = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // The command name may hold spaces: fields start after the last ')'.
    const fields = text.slice(text.lastIndexOf(')') + 2).split(' ');
    const n = (i: number) => Number(fields[i - 3]);
    return { ppid: n(4), self: (n(14) + n(15)) / TICKS_PER_SECOND, children: (n(16) + n(17)) / TICKS_PER_SECOND };
  } catch {
    return undefined;
  }
}

/** CPU seconds a process has used so far (itself and its reaped children). */
export function processCpuSeconds(pid: number): number {
  const s = stat(pid);
  return s ? s.self + s.children : 0;
}

/** The postmaster's pid, from the first line of postmaster.pid in its data directory. */
export function postmasterPid(dataDirectory: string): number {
  return Number(readFileSync(join(dataDirectory, 'postmaster.pid'), 'utf8').split('\n')[0]);
}

/**
 * CPU seconds of a PostgreSQL server so far: the postmaster, its reaped backends (cutime/cstime) and the live
 * ones. Backends that exit between two readings move from the live sum to the reaped one, so the difference of
 * two readings is the work done between them.
 */
export function postgresCpuSeconds(postmaster: number): number {
  let total = processCpuSeconds(postmaster);
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const s = stat(Number(entry));
    if (s?.ppid === postmaster) total += s.self;
  }
  return total;
}
