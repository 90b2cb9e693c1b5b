import { useCallback, useEffect, useState } from 'react';
import { ApiError, request } from '../api';
import { useSession } from '../session';
import type { MachineFieldsFragment } from '../gql/graphql';
import { HostEarningsOverview, MyHostProfile, MyMachines as MyMachinesQuery } from '../operations';
import { ErrorBox, Layout, SignedIn } from '../ui';
import { Auth } from './Auth';
import { Earnings, earningsWindow, type Overview } from './Earnings';
import type { HostProfile } from './MachineState';
import { MachineList } from './MachineList';
import { RegisterMachine } from './RegisterMachine';
import { TokenOnce, type Issued } from './TokenOnce';

/** How often the machines' online state is refreshed. */
const POLL_MS = 5000;
/** How often the earnings (and so the fee rate) are refreshed. */
const EARNINGS_POLL_MS = 30_000;

export function Portal() {
  const { token, email, expired, expiredEmail, onAuth, logOut } = useSession();
  return (
    <Layout title="Host portal" actions={token && <SignedIn email={email} onLogOut={logOut} />}>
      {token ? (
        <HostHome />
      ) : (
        <Auth onAuth={onAuth} expired={expired} expiredEmail={expiredEmail} />
      )}
    </Layout>
  );
}

function HostHome() {
  const [machines, setMachines] = useState<MachineFieldsFragment[] | null>(null);
  const [error, setError] = useState<unknown>(null);
  const [issued, setIssued] = useState<Issued | null>(null);
  const [profile, setProfile] = useState<HostProfile | null | undefined>(undefined);
  const [overview, setOverview] = useState<Overview | null>(null);
  const [overviewError, setOverviewError] = useState<unknown>(null);
  const [window_] = useState(() => earningsWindow(14));

  useEffect(() => {
    request(MyHostProfile)
      .then((d) => setProfile(d.hostProfile))
      // A host that has not filled in its profile yet has none.
      .catch((e) => {
        if (e instanceof ApiError && e.code === 'NOT_FOUND') setProfile(null);
      });
    const loadEarnings = () =>
      request(HostEarningsOverview, { from: window_.from, to: window_.to })
        .then((d) => {
          setOverview(d);
          setOverviewError(null);
        })
        .catch(setOverviewError);
    void loadEarnings();
    const timer = window.setInterval(() => void loadEarnings(), EARNINGS_POLL_MS);
    return () => window.clearInterval(timer);
  }, [window_]);

  // The platform fee rate, as the API shows it: on the latest earnings posting.
  const latest = overview?.hostEarnings.postings.reduce<{ feeRate: string; postedAt: string } | null>(
    (a, p) => (a === null || p.postedAt > a.postedAt ? p : a),
    null,
  );
  const feeRate = latest ? Number(latest.feeRate) : null;

  const refresh = useCallback(async () => {
    try {
      const data = await request(MyMachinesQuery);
      setMachines(data.myMachines);
      setError(null);
    } catch (e) {
      setError(e);
    }
  }, []);

  useEffect(() => {
    void refresh();
    const timer = window.setInterval(() => void refresh(), POLL_MS);
    return () => window.clearInterval(timer);
  }, [refresh]);

  const replace = (machine: MachineFieldsFragment) =>
    setMachines((list) => {
      const rest = (list ?? []).filter((m) => m.id !== machine.id);
      return [...rest, machine].sort((a, b) => a.name.localeCompare(b.name));
    });

  return (
    <>
      {issued ? (
        <TokenOnce issued={issued} onDone={() => setIssued(null)} />
      ) : (
        <RegisterMachine
          onRegistered={(machine, agentToken) => {
            replace(machine);
            if (agentToken) setIssued({ machineId: machine.id, machineName: machine.name, token: agentToken });
          }}
        />
      )}
      <ErrorBox error={error} />
      <MachineList machines={machines} onChanged={replace} feeRate={feeRate} profile={profile} />
      <Earnings overview={overview} error={overviewError} machines={machines} days={window_.days} />
    </>
  );
}
