import { useState, type FormEvent } from 'react';
import { request } from '../api';
import { LogIn, SignUp } from '../operations';
import { LoginFields } from '../LoginFields';
import { ErrorBox, Field, fieldProps, SessionExpired } from '../ui';

type Mode = 'signup' | 'login';

export function Auth({
  onAuth,
  expired = false,
  expiredEmail = null,
}: {
  onAuth: (token: string, email: string) => void;
  /** The session expired: open on the log-in tab, with a message. */
  expired?: boolean;
  expiredEmail?: string | null;
}) {
  const [mode, setMode] = useState<Mode>(expired ? 'login' : 'signup');
  const [email, setEmail] = useState(expiredEmail ?? '');
  const [password, setPassword] = useState('');
  const [tenantName, setTenantName] = useState('');
  const [error, setError] = useState<unknown>(null);
  const [busy, setBusy] = useState(false);

  const submit = async (event: FormEvent) => {
    event.preventDefault();
    setBusy(true);
    setError(null);
    try {
      const auth =
        mode === 'signup'
          ? (await request(SignUp, { input: { email, password, tenantName, roles: ['HOST'] } })).signUp
          : (await request(LogIn, { email, password })).login;
      onAuth(auth.token, auth.me.email);
    } catch (e) {
      setError(e);
    } finally {
      setBusy(false);
    }
  };

  const fields = ['email', 'password', 'tenantName'];
  return (
    <section aria-labelledby="auth-title" className="card narrow">
      <div role="tablist" aria-label="Account" className="tabs">
        <button type="button" role="tab" aria-selected={mode === 'signup'} onClick={() => setMode('signup')}>
          Sign up as a host
        </button>
        <button type="button" role="tab" aria-selected={mode === 'login'} onClick={() => setMode('login')}>
          Log in
        </button>
      </div>
      <h2 id="auth-title">{mode === 'signup' ? 'Create a host account' : 'Log in'}</h2>
      {expired && <SessionExpired />}
      <form onSubmit={submit} noValidate>
        <LoginFields
          idPrefix="auth"
          email={email}
          password={password}
          onEmail={setEmail}
          onPassword={setPassword}
          error={error}
          newPassword={mode === 'signup'}
        />
        {mode === 'signup' && (
          <Field id="auth-tenant" label="Organisation name" error={error} field="tenantName">
            <input
              {...fieldProps('auth-tenant', error, 'tenantName')}
              autoComplete="organization"
              required
              value={tenantName}
              onChange={(e) => setTenantName(e.target.value)}
            />
          </Field>
        )}
        <ErrorBox error={error} except={fields} />
        <button type="submit" className="primary" disabled={busy}>
          {mode === 'signup' ? 'Sign up' : 'Log in'}
        </button>
      </form>
    </section>
  );
}
