import { MetricsService } from '../metrics/metrics.service.js';
import type { CapacityRepository } from './capacity.repository.js';
import { blankProviderState, type ProviderState } from './capacity.rules.js';
import { ProviderCapacity } from './provider-capacity.js';

const open = (provider: string, now: Date): ProviderState => blankProviderState(provider, now);

describe('ProviderCapacity.refresh', () => {
  it('keeps a pause this process stored while a read of the states was under way, not the older read', async () => {
    // The claim reads the providers' states beside its transaction; a call that met a 429 may store its pause in
    // the meantime. The read, answering after, saw no pause: it must not undo the newer one, or the job that met the
    // 429 is planned an hour out on the paused provider instead of on its certified fallback.
    let answerRead!: (states: ProviderState[]) => void;
    const now = new Date();
    const repository = {
      snapshot: () => new Promise<ProviderState[]>((resolve) => (answerRead = resolve)),
      pause: async (_provider: string, ms: number) => ({ until: new Date(now.getTime() + ms), now }),
      wakeDeferred: async () => 0,
    } as unknown as CapacityRepository;
    const capacity = new ProviderCapacity(repository, new MetricsService());

    const refreshing = capacity.refresh();
    await capacity.pause('paused', 3_600_000);
    answerRead([open('paused', now), open('other', now)]);
    await refreshing;

    expect(capacity.gate('paused')).toMatchObject({ kind: 'paused' });
    expect(capacity.gate('other')).toMatchObject({ kind: 'open' });
    // The next read, begun after the pause, is the truth again.
    const next = capacity.refresh();
    answerRead([open('paused', now), open('other', now)]);
    await next;
    expect(capacity.gate('paused')).toMatchObject({ kind: 'open' });
  });
});
