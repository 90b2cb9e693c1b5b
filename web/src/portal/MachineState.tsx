import { useEffect, useState } from 'react';
import { request } from '../api';
import type { HeartbeatGapsQuery, MachineFieldsFragment, MyHostProfileQuery } from '../gql/graphql';
import { HeartbeatGaps } from '../operations';
import { ErrorBox } from '../ui';
import { percent } from '../money';

type Gap = HeartbeatGapsQuery['heartbeatGaps'][number];
export type HostProfile = MyHostProfileQuery['hostProfile'];

function duration(seconds: number): string {
  if (seconds < 90) return `${seconds} s`;
  if (seconds < 5400) return `${Math.round(seconds / 60)} min`;
  return `${(seconds / 3600).toFixed(1)} h`;
}

/** What the API says about a machine's state: online, reliability and its evidence, verification. */
export function MachineState({
  machine: m,
  profile,
}: {
  machine: MachineFieldsFragment;
  /** The host's profile; null when the host has none yet, undefined while loading. */
  profile: HostProfile | null | undefined;
}) {
  const [gaps, setGaps] = useState<Gap[] | null>(null);
  const [error, setError] = useState<unknown>(null);

  useEffect(() => {
    let live = true;
    request(HeartbeatGaps, { machineId: m.id })
      .then((d) => live && setGaps(d.heartbeatGaps))
      .catch((e) => live && setError(e));
    return () => {
      live = false;
    };
  }, [m.id, m.online]);

  const missing: string[] = [];
  if (profile === null) missing.push('a host profile (legal name, country, payout currency)');
  else if (profile) {
    if (!profile.legalName) missing.push('the legal name on the host profile');
    if (!profile.country) missing.push('the country on the host profile');
    if (!profile.payoutCurrency) missing.push('the payout currency on the host profile');
    if (profile.verification === 'UNVERIFIED') missing.push('verification of the host by an operator');
  }
  if (!m.lastHeartbeatAtUtc) missing.push('a first heartbeat from the agent');
  if (!m.pricePerGpuHour) missing.push('a price (needed to list)');

  const verification = profile?.verification;
  return (
    <div className="state">
      <dl className="facts">
        <div>
          <dt>Agent</dt>
          <dd>
            {m.online ? 'Heard from within the grace period' : 'Silent past the grace period'}
            {m.lastHeartbeatAtUtc ? ` (last heard ${new Date(m.lastHeartbeatAtUtc).toLocaleString()})` : ' (never connected)'}
          </dd>
        </div>
        <div>
          <dt>GPUs rented</dt>
          <dd>
            {m.gpusAllocated} of {m.gpuCount}
          </dd>
        </div>
        <div>
          <dt>Reliability</dt>
          <dd>{m.reliability != null ? percent(Number(m.reliability)) : 'not measured yet'}</dd>
        </div>
        <div>
          <dt>Machine verified</dt>
          <dd>{m.verified ? 'Yes' : 'No'}</dd>
        </div>
        <div>
          <dt>Host verification</dt>
          <dd>
            {profile === undefined
              ? 'not known'
              : profile === null
                ? 'no host profile yet'
                : `${verification === 'VERIFIED' ? 'Verified' : verification === 'SUSPENDED' ? 'Suspended' : 'Unverified'}${profile.verificationReason ? `: ${profile.verificationReason}` : ''}`}
          </dd>
        </div>
      </dl>
      {missing.length > 0 && !m.verified && (
        <>
          <p className="label">Still missing</p>
          <ul className="missing">
            {missing.map((x) => (
              <li key={x}>{x}</li>
            ))}
          </ul>
          {missing.some((x) => x.includes('host profile')) && (
            <p>
              The host profile is filled in on the <a href="/portal/profile">Profile and payouts</a> page.
            </p>
          )}
        </>
      )}
      <p className="label">Heartbeat gaps (the evidence behind reliability)</p>
      <ErrorBox error={error} />
      {gaps === null && !error ? (
        <p className="muted">Loading…</p>
      ) : gaps && gaps.length === 0 ? (
        <p className="muted">No gaps in the reliability window.</p>
      ) : (
        gaps && (
          <ul className="gaps">
            {gaps.slice(0, 10).map((g) => (
              <li key={g.startedAtUtc}>
                {new Date(g.startedAtUtc).toLocaleString()}: {duration(g.seconds)}
                {g.endedAtUtc ? '' : ' (still silent)'}
              </li>
            ))}
          </ul>
        )
      )}
    </div>
  );
}
