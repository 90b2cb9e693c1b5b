import { useCallback, useEffect, useState } from 'react';
import { getToken, request, setToken } from '../api';
import type { MachineFieldsFragment } from '../gql/graphql';
import { MyMachines as MyMachinesQuery } from '../operations';
import { ErrorBox, Layout } from '../ui';
import { Auth } from './Auth';
import { MachineList } from './MachineList';
import { RegisterMachine } from './RegisterMachine';
import { TokenOnce, type Issued } from './TokenOnce';

const EMAIL_KEY = 'gpumarket.email';
/** How often the machines' online state is refreshed. */
const POLL_MS = 5000;

export function Portal() {
  const [token, setTok] = useState<string | null>(getToken());
  const [email, setEmail] = useState<string | null>(sessionStorage.getItem(EMAIL_KEY));

  const onAuth = (newToken: string, newEmail: string) => {
    setToken(newToken);
    sessionStorage.setItem(EMAIL_KEY, newEmail);
    setTok(newToken);
    setEmail(newEmail);
  };
  const logOut = useCallback(() => {
    setToken(null);
    sessionStorage.removeItem(EMAIL_KEY);
    setTok(null);
    setEmail(null);
  }, []);

  return (
    <Layout
      title="Host portal"
      actions={
        token && (
          <>
            <span className="who">{email}</span>
            <button type="button" onClick={logOut}>
              Log out
            </button>
          </>
        )
      }
    >
      {token ? <HostHome onSignedOut={logOut} /> : <Auth onAuth={onAuth} />}
    </Layout>
  );
}

function HostHome({ onSignedOut }: { onSignedOut: () => void }) {
  const [machines, setMachines] = useState<MachineFieldsFragment[] | null>(null);
  const [error, setError] = useState<unknown>(null);
  const [issued, setIssued] = useState<Issued | null>(null);

  const refresh = useCallback(async () => {
    try {
      const data = await request(MyMachinesQuery);
      setMachines(data.myMachines);
      setError(null);
    } catch (e) {
      setError(e);
      if (getToken() === null) onSignedOut();
    }
  }, [onSignedOut]);

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
      <MachineList machines={machines} onChanged={replace} />
    </>
  );
}
