import { useCallback, useEffect, useRef, useState, type FormEvent } from 'react';
import { request } from '../api';
import type { ApiKeyFieldsFragment, Scope } from '../gql/graphql';
import { ErrorBox, Field, fieldProps, newKey } from '../ui';
import { ApiKeysPage, CreateApiKey, RevokeApiKey } from './api-key-operations';

const SCOPES: { scope: Scope; label: string }[] = [
  { scope: 'READ', label: 'Read: instances, usage, balance' },
  { scope: 'RENT', label: 'Rent: order, stop and destroy instances' },
  { scope: 'HOST', label: 'Host: manage machines and prices' },
  { scope: 'BILLING', label: 'Billing: balance, invoices, top-ups' },
  { scope: 'ADMIN', label: 'Admin: operator actions' },
];

const when = (at: string | null | undefined, never: string) => (at ? new Date(at).toLocaleString() : never);

/** The secret of a key just made: shown once, then forgotten. */
function SecretOnce({ name, secret, onDone }: { name: string; secret: string; onDone: () => void }) {
  const [copied, setCopied] = useState<'yes' | 'no' | null>(null);
  const heading = useRef<HTMLHeadingElement>(null);
  useEffect(() => heading.current?.focus(), []);
  const copy = async () => {
    try {
      await navigator.clipboard.writeText(secret);
      setCopied('yes');
    } catch {
      setCopied('no');
    }
  };
  return (
    <section aria-labelledby="secret-title" className="card notice">
      <h2 id="secret-title" tabIndex={-1} ref={heading}>
        API key “{name}” is created
      </h2>
      <p>
        Send it as <code>Authorization: Bearer &lt;key&gt;</code>. <strong>The key is shown only this once</strong>;
        if you lose it, revoke it and create another.
      </p>
      <label htmlFor="api-key-secret">API key</label>
      <div className="copy">
        <input id="api-key-secret" readOnly value={secret} onFocus={(e) => e.target.select()} />
        <button type="button" onClick={copy}>
          Copy
        </button>
      </div>
      <p role="status" aria-live="polite">
        {copied === 'yes' && 'Copied to the clipboard.'}
        {copied === 'no' && 'Copying was refused by the browser: select the key and copy it.'}
      </p>
      <button type="button" className="primary" onClick={onDone}>
        I have saved the key
      </button>
    </section>
  );
}

function CreateKey({ held, onCreated }: { held: Scope[]; onCreated: (key: ApiKeyFieldsFragment, secret: string | null | undefined) => void }) {
  const [name, setName] = useState('');
  const [scopes, setScopes] = useState<Scope[]>(['READ']);
  // One key per key being created: a retry after a lost answer returns the
  // same API key rather than a second one.
  const [idempotencyKey, setIdempotencyKey] = useState(newKey);
  const [error, setError] = useState<unknown>(null);
  const [busy, setBusy] = useState(false);

  const toggle = (scope: Scope, on: boolean) =>
    setScopes((list) => (on ? [...list.filter((s) => s !== scope), scope] : list.filter((s) => s !== scope)));

  const submit = async (event: FormEvent) => {
    event.preventDefault();
    setBusy(true);
    setError(null);
    try {
      const data = await request(CreateApiKey, { input: { name: name.trim(), scopes, idempotencyKey } });
      onCreated(data.createApiKey.apiKey, data.createApiKey.secret);
      setName('');
      setIdempotencyKey(newKey());
    } catch (e) {
      setError(e);
    } finally {
      setBusy(false);
    }
  };

  return (
    <section aria-labelledby="create-key-title" className="card">
      <h2 id="create-key-title">Create an API key</h2>
      <form onSubmit={submit} noValidate className="grid">
        <Field id="key-name" label="Name" error={error} field="name" hint="What uses it, e.g. “CI”.">
          <input
            {...fieldProps('key-name', error, 'name', true)}
            required
            maxLength={100}
            value={name}
            onChange={(e) => setName(e.target.value)}
          />
        </Field>
        <fieldset className="wide" aria-describedby="key-scopes-hint">
          <legend>Scopes</legend>
          <small id="key-scopes-hint">A key can do at most what you can.</small>
          {SCOPES.filter((s) => held.includes(s.scope)).map((s) => (
            <div key={s.scope} className="check">
              <input
                type="checkbox"
                id={`scope-${s.scope}`}
                checked={scopes.includes(s.scope)}
                onChange={(e) => toggle(s.scope, e.target.checked)}
              />
              <label htmlFor={`scope-${s.scope}`}>{s.label}</label>
            </div>
          ))}
        </fieldset>
        <div className="wide">
          <ErrorBox error={error} except={['name']} />
          <button type="submit" className="primary" disabled={busy}>
            Create API key
          </button>
        </div>
      </form>
    </section>
  );
}

function KeyRow({ apiKey: k, me, onRevoked }: { apiKey: ApiKeyFieldsFragment; me: string | null; onRevoked: (key: ApiKeyFieldsFragment) => void }) {
  const [confirming, setConfirming] = useState(false);
  const [error, setError] = useState<unknown>(null);
  const [busy, setBusy] = useState(false);
  const confirmButton = useRef<HTMLButtonElement>(null);
  useEffect(() => {
    if (confirming) confirmButton.current?.focus();
  }, [confirming]);

  const revoke = async () => {
    setBusy(true);
    setError(null);
    try {
      const data = await request(RevokeApiKey, { id: k.id });
      setConfirming(false);
      onRevoked(data.revokeApiKey);
    } catch (e) {
      setError(e);
    } finally {
      setBusy(false);
    }
  };

  return (
    <tr>
      <th scope="row">{k.name}</th>
      <td>
        <code>gpm_{k.prefix}_…</code>
      </td>
      <td>{k.scopes.map((s) => s.toLowerCase()).join(', ')}</td>
      <td>{k.ownerEmail === me ? 'you' : k.ownerEmail}</td>
      <td>{when(k.createdAtUtc, '')}</td>
      <td>{when(k.lastUsedAtUtc, 'never')}</td>
      <td>
        {k.revokedAtUtc ? (
          `Revoked ${when(k.revokedAtUtc, '')}`
        ) : confirming ? (
          <div role="group" aria-label={`Confirm revoking ${k.name}`}>
            <p>Revoke “{k.name}”? Requests with it fail from now on.</p>
            <button ref={confirmButton} type="button" className="danger" disabled={busy} onClick={revoke}>
              Yes, revoke {k.name}
            </button>{' '}
            <button type="button" disabled={busy} onClick={() => setConfirming(false)}>
              Cancel
            </button>
          </div>
        ) : (
          <button type="button" onClick={() => setConfirming(true)} aria-label={`Revoke ${k.name}`}>
            Revoke
          </button>
        )}
        <ErrorBox error={error} />
      </td>
    </tr>
  );
}

/** The API keys page: the caller's keys (the tenant's for owners and admins), create, revoke. */
export function ApiKeys() {
  const [keys, setKeys] = useState<ApiKeyFieldsFragment[] | null>(null);
  const [me, setMe] = useState<{ email: string; scopes: Scope[] } | null>(null);
  const [showRevoked, setShowRevoked] = useState(false);
  const [error, setError] = useState<unknown>(null);
  const [created, setCreated] = useState<{ name: string; secret: string } | null>(null);

  const load = useCallback(async () => {
    try {
      const data = await request(ApiKeysPage, { includeRevoked: showRevoked });
      setKeys(data.apiKeys);
      setMe(data.me);
      setError(null);
    } catch (e) {
      setError(e);
    }
  }, [showRevoked]);

  useEffect(() => {
    void load();
  }, [load]);

  const replace = (key: ApiKeyFieldsFragment) =>
    setKeys((list) => {
      const rest = (list ?? []).filter((k) => k.id !== key.id);
      const all = showRevoked || !key.revokedAtUtc ? [key, ...rest] : rest;
      // By instant, not by text: a DateTime's fraction has 0, 3 or 6 digits.
      return all.sort((a, b) => Date.parse(b.createdAtUtc) - Date.parse(a.createdAtUtc));
    });

  return (
    <>
      {created ? (
        <SecretOnce name={created.name} secret={created.secret} onDone={() => setCreated(null)} />
      ) : (
        me && (
          <CreateKey
            held={me.scopes}
            onCreated={(key, secret) => {
              replace(key);
              if (secret) setCreated({ name: key.name, secret });
            }}
          />
        )
      )}
      <section aria-labelledby="keys-title" className="card">
        <h2 id="keys-title">API keys</h2>
        <p>
          Keys act as the user who made them. Owners and admins see every key of the tenant; other users their own.
          A revoked key fails from its next request on. Last use is recorded to the minute.
        </p>
        <div className="check">
          <input
            type="checkbox"
            id="show-revoked"
            checked={showRevoked}
            onChange={(e) => setShowRevoked(e.target.checked)}
          />
          <label htmlFor="show-revoked">Show revoked keys</label>
        </div>
        <ErrorBox error={error} />
        {keys === null ? (
          !error && <p>Loading…</p>
        ) : keys.length === 0 ? (
          <p>No API keys yet.</p>
        ) : (
          <div className="scroll" tabIndex={0} role="region" aria-label="API keys, as a table">
            <table className="keys">
              <thead>
                <tr>
                  <th scope="col">Name</th>
                  <th scope="col">Key</th>
                  <th scope="col">Scopes</th>
                  <th scope="col">User</th>
                  <th scope="col">Created</th>
                  <th scope="col">Last used</th>
                  <th scope="col">Status</th>
                </tr>
              </thead>
              <tbody>
                {keys.map((k) => (
                  <KeyRow key={k.id} apiKey={k} me={me?.email ?? null} onRevoked={replace} />
                ))}
              </tbody>
            </table>
          </div>
        )}
      </section>
    </>
  );
}
