import { useId, useState } from 'react';
import { money, percent, preview } from '../money';

/**
 * What a price earns the host: the price less the platform fee, per GPU-hour
 * and per day at a chosen utilisation, for the machine's GPUs. The fee rate
 * is the API's public `platform.platformFeeRate`, the rate billing charges;
 * until it is known only gross is shown.
 */
export function EarningsPreview({
  price,
  currency,
  gpus,
  feeRate,
}: {
  price: string;
  currency: string;
  gpus: number;
  feeRate: number | null;
}) {
  const [utilisation, setUtilisation] = useState(70);
  const id = useId();
  const p = Number(price.trim());
  const valid = price.trim() !== '' && Number.isFinite(p) && p > 0;
  const sub = (n: number) => money(n, currency, n < 1 ? 4 : 2);
  const utilId = `${id}-util`;
  const utilNumId = `${id}-util-n`;
  const r = valid ? preview(p, feeRate, gpus, utilisation) : null;

  return (
    <div className="preview" role="group" aria-labelledby={`${id}-title`}>
      <h4 id={`${id}-title`}>Earnings preview</h4>
      <div className="row">
        <div className="field">
          <label htmlFor={utilId}>Utilisation</label>
          <input
            id={utilId}
            type="range"
            min={0}
            max={100}
            step={5}
            value={utilisation}
            aria-valuetext={`${utilisation} %`}
            onChange={(e) => setUtilisation(Number(e.target.value))}
          />
        </div>
        <div className="field">
          <label htmlFor={utilNumId}>Utilisation (%)</label>
          <input
            id={utilNumId}
            className="short"
            type="number"
            min={0}
            max={100}
            value={utilisation}
            onChange={(e) => setUtilisation(Math.min(100, Math.max(0, Number(e.target.value) || 0)))}
          />
        </div>
      </div>
      {r === null ? (
        <p className="muted">Enter a price to see what it earns.</p>
      ) : (
        <dl className="figures" aria-live="polite">
          <div>
            <dt>Renters pay per GPU-hour</dt>
            <dd data-testid="gross-hour">{sub(r.grossPerGpuHour)}</dd>
          </div>
          {r.netPerGpuHour !== null && feeRate !== null ? (
            <>
              <div>
                <dt>You earn per GPU-hour (after the {percent(feeRate)} platform fee)</dt>
                <dd data-testid="net-hour">{sub(r.netPerGpuHour)}</dd>
              </div>
              <div>
                <dt>
                  You earn per day ({gpus} GPU{gpus === 1 ? '' : 's'} at {utilisation} %)
                </dt>
                <dd data-testid="net-day">{money(r.netPerDay ?? 0, currency)}</dd>
              </div>
            </>
          ) : (
            <div>
              <dt>
                Gross per day, before the platform fee ({gpus} GPU{gpus === 1 ? '' : 's'} at {utilisation} %)
              </dt>
              <dd data-testid="gross-day">{money(r.grossPerDay, currency)}</dd>
            </div>
          )}
        </dl>
      )}
      {r !== null && feeRate === null && (
        <p className="muted" data-testid="fee-unknown">
          Gross only: the platform fee rate could not be loaded.
        </p>
      )}
    </div>
  );
}
