import { useCallback, useEffect, useState, type MouseEvent } from 'react';
import { ApiError, request } from '../api';
import { useSession } from '../session';
import type { MachineFieldsFragment } from '../gql/graphql';
import { HostEarningsOverview, MyHostProfile, MyMachines as MyMachinesQuery, PlatformFeeRate } from '../operations';
import { ErrorBox, Layout, SignedIn } from '../ui';
import { ApiKeys } from './ApiKeys';
import { Auth } from './Auth';
import { Earnings, earningsWindow, type Overview } from './Earnings';
import { HostProfileCard } from './HostProfileForm';
import type { HostProfile } from './MachineState';
import { MachineList } from './MachineList';
import { PayoutAccountCard } from './PayoutAccount';
import { RegisterMachine } from './RegisterMachine';
import { TokenOnce, type Issued } from './TokenOnce';
import { Webhooks } from '../webhooks/Webhooks';

/** How often the machines' online state is refreshed. */
const POLL_MS = 5000;
/** How often the earnings (and so the fee rate) are refreshed. */
const EARNINGS_POLL_MS = 30_000;

/** The portal's pages, each at its own path so a reload stays on it. */
type View = 'machines' | 'profile' | 'api-keys' | 'webhooks';
const PATHS: Record<View, string> = {
  machines: '/portal',
  profile: '/portal/profile',
  'api-keys': '/portal/api-keys',
  webhooks: '/portal/webhooks',
};

function viewOfPath(): View {
  const path = window.location.pathname.replace(/\/+$/, '');
  if (path === PATHS.profile) return 'profile';
  if (path === PATHS['api-keys']) return 'api-keys';
  if (path === PATHS.webhooks) return 'webhooks';
  return 'machines';
}

function useView(): [View, (view: View) => void] {
  const [view, setView] = useState<View>(viewOfPath);
  useEffect(() => {
    const onPop = () => setView(viewOfPath());
    window.addEventListener('popstate', onPop);
    return () => window.removeEventListener('popstate', onPop);
  }, []);
  const go = useCallback((next: View) => {
    if (viewOfPath() !== next) window.history.pushState(null, '', PATHS[next]);
    setView(next);
  }, []);
  return [view, go];
}

function PortalNav({ view, onGo }: { view: View; onGo: (view: View) => void }) {
  const link = (to: View, label: string) => (
    <a
      href={PATHS[to]}
      aria-current={view === to ? 'page' : undefined}
      onClick={(e: MouseEvent) => {
        // A new tab or window keeps the browser's own handling.
        if (e.metaKey || e.ctrlKey || e.shiftKey || e.altKey || e.button !== 0) return;
        e.preventDefault();
        onGo(to);
      }}
    >
      {label}
    </a>
  );
  return (
    <nav aria-label="Host portal pages" className="subnav">
      {link('machines', 'Machines and earnings')}
      {link('profile', 'Profile and payouts')}
      {link('api-keys', 'API keys')}
      {link('webhooks', 'Webhooks')}
    </nav>
  );
}

export function Portal() {
  const { token, email, expired, expiredEmail, onAuth, logOut } = useSession();
  return (
    <Layout title="Host portal" actions={token && <SignedIn email={email} onLogOut={logOut} />}>
      {token ? (
        <SignedInHome email={email} />
      ) : (
        <Auth onAuth={onAuth} expired={expired} expiredEmail={expiredEmail} />
      )}
    </Layout>
  );
}

function SignedInHome({ email }: { email: string | null }) {
  const [view, go] = useView();
  // API keys and webhooks are every user's, host or not: those pages load
  // none of the host's data.
  if (view === 'api-keys' || view === 'webhooks') {
    return (
      <>
        <PortalNav view={view} onGo={go} />
        {view === 'api-keys' ? <ApiKeys /> : <Webhooks />}
      </>
    );
  }
  return <HostHome email={email} view={view} go={go} />;
}

function HostHome({ email, view, go }: { email: string | null; view: View; go: (view: View) => void }) {
  const [machines, setMachines] = useState<MachineFieldsFragment[] | null>(null);
  const [error, setError] = useState<unknown>(null);
  const [issued, setIssued] = useState<Issued | null>(null);
  const [profile, setProfile] = useState<HostProfile | null | undefined>(undefined);
  const [profileError, setProfileError] = useState<unknown>(null);
  const [overview, setOverview] = useState<Overview | null>(null);
  const [overviewError, setOverviewError] = useState<unknown>(null);
  const [window_] = useState(() => earningsWindow(14));

  useEffect(() => {
    request(MyHostProfile)
      .then((d) => setProfile(d.hostProfile))
      // A host that has not filled in its profile yet has none.
      .catch((e) => {
        if (e instanceof ApiError && e.code === 'NOT_FOUND') setProfile(null);
        else setProfileError(e);
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

  // The platform fee rate from the public terms; until it loads (or if it
  // cannot), the preview shows gross only.
  const [feeRate, setFeeRate] = useState<number | null>(null);
  useEffect(() => {
    request(PlatformFeeRate)
      .then((d) => setFeeRate(Number(d.platform.platformFeeRate)))
      .catch(() => setFeeRate(null));
  }, []);

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

  if (view === 'profile') {
    return (
      <>
        <PortalNav view={view} onGo={go} />
        <HostProfileCard profile={profile} error={profileError} onSaved={setProfile} />
        <PayoutAccountCard
          defaults={
            profile === undefined && !profileError
              ? undefined
              : { country: profile?.country ?? '', email: email ?? '' }
          }
        />
      </>
    );
  }

  return (
    <>
      <PortalNav view={view} onGo={go} />
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
