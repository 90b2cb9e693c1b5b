// The webhooks page, the same in the host portal (/portal/webhooks) and on
// the billing page (/billing/webhooks): the tenant's endpoints, adding one
// (its signing secret shown once), rotating the secret, a test ping,
// enabling and disabling, deleting, and the delivery log with each
// attempt, the payload and "Redeliver".
import { Fragment, useCallback, useEffect, useRef, useState, type FormEvent, type RefObject } from 'react';
import { ApiError, request } from '../api';
import type {
  WebhookDeliveryFieldsFragment,
  WebhookDeliveryStatus,
  WebhookEndpointFieldsFragment,
  WebhooksPageQuery,
} from '../gql/graphql';
import { useDraft } from '../session';
import { ErrorBox, Field, fieldProps } from '../ui';
import {
  CreateWebhookEndpoint,
  DeleteWebhookEndpoint,
  RedeliverWebhook,
  RotateWebhookSecret,
  SendWebhookTest,
  UpdateWebhookEndpoint,
  WebhookDeliveries,
  WebhooksPage,
} from './operations';

type Endpoint = WebhookEndpointFieldsFragment;
type Delivery = WebhookDeliveryFieldsFragment;
type EventType = WebhooksPageQuery['webhookEventTypes'][number];

/** How often the delivery log is refreshed. */
const POLL_MS = 5000;
/** Deliveries shown (the API's limit is 1 to 100). */
const LOG_LIMIT = 50;

/** An instant from the API (RFC 3339), in the browser's locale. */
function When({ at }: { at: string }) {
  return <time dateTime={at}>{new Date(at).toLocaleString()}</time>;
}

const STATUS_LABEL: Record<WebhookDeliveryStatus, string> = {
  PENDING: 'pending',
  DELIVERED: 'delivered',
  FAILED: 'failed',
};

/** A signing secret just made (new endpoint or rotation): shown once, then forgotten. */
export interface ShownSecret {
  url: string;
  secret: string;
  /** After a rotation: until when the previous secret still signs. */
  previousUntil: string | null;
}

function SecretOnce({ shown, onDone }: { shown: ShownSecret; onDone: () => void }) {
  const [copied, setCopied] = useState<'yes' | 'no' | null>(null);
  const heading = useRef<HTMLHeadingElement>(null);
  useEffect(() => heading.current?.focus(), []);
  const copy = async () => {
    try {
      await navigator.clipboard.writeText(shown.secret);
      setCopied('yes');
    } catch {
      setCopied('no');
    }
  };
  const rotated = shown.previousUntil !== null;
  return (
    <section aria-labelledby="webhook-secret-title" className="card notice">
      <h2 id="webhook-secret-title" tabIndex={-1} ref={heading}>
        {rotated ? 'New signing secret' : 'Webhook endpoint added'}
      </h2>
      <p>
        {rotated ? 'The endpoint ' : 'Deliveries to '}
        <code className="wh-url">{shown.url}</code>{' '}
        {rotated ? 'is now signed with this secret' : 'are signed with this secret'} (Standard Webhooks:{' '}
        <code>webhook-signature</code> is <code>v1,</code> and an HMAC-SHA256 of{' '}
        <code>webhook-id.webhook-timestamp.body</code>).
      </p>
      <p id="webhook-secret-note">
        <strong>Copy it now: it will not be shown again.</strong> If you lose it, rotate the secret to get a new one.
      </p>
      {rotated && shown.previousUntil && (
        <p data-testid="webhook-previous-until">
          The previous secret keeps signing beside the new one until <When at={shown.previousUntil} />, so your
          receiver can switch over; after that only the new one signs.
        </p>
      )}
      <label htmlFor="webhook-secret">Signing secret</label>
      <div className="copy">
        <input
          id="webhook-secret"
          readOnly
          value={shown.secret}
          aria-describedby="webhook-secret-note"
          onFocus={(e) => e.target.select()}
        />
        <button type="button" onClick={copy}>
          Copy
        </button>
      </div>
      <p role="status" aria-live="polite">
        {copied === 'yes' && 'Copied to the clipboard.'}
        {copied === 'no' && 'Copying was refused by the browser: select the secret and copy it.'}
      </p>
      <button type="button" className="primary" onClick={onDone}>
        I have saved the secret
      </button>
    </section>
  );
}

function AddEndpoint({ eventTypes, onAdded }: { eventTypes: EventType[]; onAdded: (created: Endpoint, secret: string) => void }) {
  const [url, setUrl] = useDraft('webhook.url', '');
  const [description, setDescription] = useDraft('webhook.description', '');
  const [types, setTypes] = useState<string[]>([]);
  const [error, setError] = useState<unknown>(null);
  const [busy, setBusy] = useState(false);

  const toggle = (name: string, on: boolean) =>
    setTypes((list) => (on ? [...list.filter((t) => t !== name), name] : list.filter((t) => t !== name)));

  const submit = async (event: FormEvent) => {
    event.preventDefault();
    setBusy(true);
    setError(null);
    try {
      const data = await request(CreateWebhookEndpoint, {
        input: { url: url.trim(), description: description.trim() || null, eventTypes: types },
      });
      setUrl('');
      setDescription('');
      setTypes([]);
      onAdded(data.createWebhookEndpoint.endpoint, data.createWebhookEndpoint.secret);
    } catch (e) {
      setError(e);
    } finally {
      setBusy(false);
    }
  };

  const typesError = error instanceof ApiError ? error.forField('eventTypes') : undefined;
  return (
    <section aria-labelledby="add-webhook-title" className="card">
      <h2 id="add-webhook-title">Add a webhook endpoint</h2>
      <form onSubmit={submit} noValidate className="grid">
        <div className="wide">
          <Field
            id="webhook-url"
            label="Endpoint URL"
            error={error}
            field="url"
            hint="https only; private, loopback and link-local addresses are refused."
          >
            <input
              {...fieldProps('webhook-url', error, 'url', true)}
              type="url"
              inputMode="url"
              autoComplete="url"
              required
              maxLength={2000}
              placeholder="https://example.com/hooks/gpumarket"
              value={url}
              onChange={(e) => setUrl(e.target.value)}
            />
          </Field>
        </div>
        <div className="wide">
          <Field id="webhook-description" label="Description (optional)" error={error} field="description">
            <input
              {...fieldProps('webhook-description', error, 'description')}
              maxLength={500}
              value={description}
              onChange={(e) => setDescription(e.target.value)}
            />
          </Field>
        </div>
        <fieldset
          className="wide"
          aria-describedby={['webhook-types-hint', typesError ? 'webhook-types-error' : null].filter(Boolean).join(' ')}
        >
          <legend>Event types</legend>
          <small id="webhook-types-hint">None checked: the endpoint receives every event type, new ones included.</small>
          {eventTypes.map((t) => (
            <div key={t.name} className="check">
              <input
                type="checkbox"
                id={`webhook-type-${t.name}`}
                checked={types.includes(t.name)}
                onChange={(e) => toggle(t.name, e.target.checked)}
              />
              <label htmlFor={`webhook-type-${t.name}`}>
                <code>{t.name}</code> <span className="wh-type-desc">{t.description}</span>
              </label>
            </div>
          ))}
          {typesError && (
            <small className="field-error" id="webhook-types-error" role="alert">
              {typesError.message} <code>{typesError.code}</code>
            </small>
          )}
        </fieldset>
        <div className="wide">
          <ErrorBox error={error} except={['url', 'description', 'eventTypes']} />
          <button type="submit" className="primary" disabled={busy}>
            Add endpoint
          </button>
        </div>
      </form>
    </section>
  );
}

function EndpointItem({
  endpoint: e,
  onChanged,
  onDeleted,
  onSecret,
  onTested,
  onShowLog,
}: {
  endpoint: Endpoint;
  onChanged: (endpoint: Endpoint) => void;
  onDeleted: (id: string) => void;
  onSecret: (shown: ShownSecret, endpoint: Endpoint) => void;
  onTested: (delivery: Delivery) => void;
  onShowLog: (id: string) => void;
}) {
  const [confirming, setConfirming] = useState(false);
  const [error, setError] = useState<unknown>(null);
  const [busy, setBusy] = useState(false);
  const [done, setDone] = useState('');
  const confirmButton = useRef<HTMLButtonElement>(null);
  const deleteButton = useRef<HTMLButtonElement>(null);
  const wasConfirming = useRef(false);
  useEffect(() => {
    if (confirming) confirmButton.current?.focus();
    else if (wasConfirming.current) deleteButton.current?.focus();
    wasConfirming.current = confirming;
  }, [confirming]);

  const act = async (what: () => Promise<string>) => {
    setBusy(true);
    setError(null);
    setDone('');
    try {
      setDone(await what());
    } catch (err) {
      setError(err);
    } finally {
      setBusy(false);
    }
  };

  const sendTest = () =>
    act(async () => {
      const d = (await request(SendWebhookTest, { endpointId: e.id })).sendWebhookTest;
      onTested(d);
      return `Test event sent: delivery ${d.webhookId} is ${STATUS_LABEL[d.status]}; see the delivery log.`;
    });
  const rotate = () =>
    act(async () => {
      const r = (await request(RotateWebhookSecret, { id: e.id })).rotateWebhookSecret;
      onSecret({ url: r.endpoint.url, secret: r.secret, previousUntil: r.endpoint.previousSecretUntil ?? null }, r.endpoint);
      return '';
    });
  const setEnabled = (enabled: boolean) =>
    act(async () => {
      const u = (await request(UpdateWebhookEndpoint, { id: e.id, input: { enabled } })).updateWebhookEndpoint;
      onChanged(u);
      return enabled ? 'Enabled: events are sent to it again.' : 'Disabled: no events are sent to it.';
    });
  const remove = () =>
    act(async () => {
      await request(DeleteWebhookEndpoint, { id: e.id });
      onDeleted(e.id);
      return '';
    });

  const headingId = `webhook-${e.id}-url`;
  return (
    <li className="wh-endpoint" data-endpoint-id={e.id}>
      <div className="wh-endpoint-head">
        <h3 id={headingId} className="wh-url">
          {e.url}
        </h3>
        <span className={`badge ${e.enabled ? 'on' : 'off'}`}>{e.enabled ? 'enabled' : 'disabled'}</span>
      </div>
      <dl className="facts">
        <div>
          <dt>Description</dt>
          <dd>{e.description || <span className="muted">none</span>}</dd>
        </div>
        <div>
          <dt>Event types</dt>
          <dd>
            {e.eventTypes.length === 0 ? (
              'All events'
            ) : (
              e.eventTypes.map((t, i) => (
                <Fragment key={t}>
                  {i > 0 && ', '}
                  <code>{t}</code>
                </Fragment>
              ))
            )}
          </dd>
        </div>
        <div>
          <dt>Status</dt>
          <dd>
            {e.enabled ? (
              'Enabled'
            ) : (
              <>
                Disabled{e.disabledReason ? ` (reason: ${e.disabledReason})` : ''}
                {e.disabledAt && (
                  <>
                    {' '}
                    (<When at={e.disabledAt} />)
                  </>
                )}
              </>
            )}
          </dd>
        </div>
        <div>
          <dt>Added</dt>
          <dd>
            <When at={e.createdAt} />
          </dd>
        </div>
        {e.previousSecretUntil && new Date(e.previousSecretUntil).getTime() > Date.now() && (
          <div>
            <dt>Previous secret</dt>
            <dd>
              also signs until <When at={e.previousSecretUntil} />
            </dd>
          </div>
        )}
      </dl>
      {confirming ? (
        <div role="group" aria-label={`Confirm deleting ${e.url}`} className="wh-confirm">
          <p>Delete the endpoint {e.url} and its delivery log? Events are no longer sent to it.</p>
          <button ref={confirmButton} type="button" className="danger" disabled={busy} onClick={() => void remove()}>
            Yes, delete {e.url}
          </button>{' '}
          <button type="button" disabled={busy} onClick={() => setConfirming(false)}>
            Cancel
          </button>
        </div>
      ) : (
        <div className="wh-actions" role="group" aria-label={`Actions for ${e.url}`}>
          <button type="button" disabled={busy} onClick={() => void sendTest()} aria-label={`Send test to ${e.url}`}>
            Send test
          </button>
          <button type="button" disabled={busy} onClick={() => void rotate()} aria-label={`Rotate secret of ${e.url}`}>
            Rotate secret
          </button>
          <button
            type="button"
            disabled={busy}
            onClick={() => void setEnabled(!e.enabled)}
            aria-label={`${e.enabled ? 'Disable' : 'Enable'} ${e.url}`}
          >
            {e.enabled ? 'Disable' : 'Enable'}
          </button>
          <button type="button" onClick={() => onShowLog(e.id)} aria-label={`Deliveries of ${e.url}`}>
            Deliveries
          </button>
          <button
            ref={deleteButton}
            type="button"
            className="danger-outline"
            disabled={busy}
            onClick={() => {
              setDone('');
              setConfirming(true);
            }}
            aria-label={`Delete ${e.url}`}
          >
            Delete
          </button>
        </div>
      )}
      <p role="status" aria-live="polite" className="wh-done">
        {done}
      </p>
      <ErrorBox error={error} />
    </li>
  );
}

function lastOutcome(d: Delivery): string {
  const last = d.attemptLog[0];
  if (!last) return d.status === 'PENDING' ? 'not tried yet' : '';
  const parts = [last.statusCode !== null && last.statusCode !== undefined ? `HTTP ${last.statusCode}` : 'no response'];
  if (last.error) parts.push(last.error);
  return parts.join(': ');
}

function prettyPayload(payload: string): string {
  try {
    return JSON.stringify(JSON.parse(payload), null, 2);
  } catch {
    return payload;
  }
}

function DeliveryRows({
  delivery: d,
  endpointUrl,
  showEndpoint,
  open,
  onToggle,
  onRedelivered,
}: {
  delivery: Delivery;
  endpointUrl: string | null;
  showEndpoint: boolean;
  open: boolean;
  onToggle: () => void;
  onRedelivered: (d: Delivery) => void;
}) {
  const [error, setError] = useState<unknown>(null);
  const [busy, setBusy] = useState(false);
  const [done, setDone] = useState('');
  const redeliver = async () => {
    setBusy(true);
    setError(null);
    setDone('');
    try {
      const r = (await request(RedeliverWebhook, { deliveryId: d.id })).redeliverWebhook;
      onRedelivered(r);
      setDone('Sent again.');
    } catch (e) {
      setError(e);
    } finally {
      setBusy(false);
    }
  };
  const detailsId = `webhook-delivery-${d.id}`;
  const label = `${d.eventType} ${d.webhookId}`;
  return (
    <>
      <tr data-delivery-id={d.id}>
        <th scope="row">
          <code>{d.eventType}</code>
          <br />
          <small>
            <code>{d.webhookId}</code>
          </small>
        </th>
        {showEndpoint && <td className="wh-url">{endpointUrl ?? <span className="muted">deleted endpoint</span>}</td>}
        <td>
          <span className={`badge wh-status-${d.status.toLowerCase()}`}>{STATUS_LABEL[d.status]}</span>
          {d.status === 'PENDING' && d.nextAttemptAt && (
            <>
              <br />
              <small>
                next try <When at={d.nextAttemptAt} />
              </small>
            </>
          )}
          {d.status === 'DELIVERED' && d.deliveredAt && (
            <>
              <br />
              <small>
                <When at={d.deliveredAt} />
              </small>
            </>
          )}
        </td>
        <td>{d.attempts}</td>
        <td>
          <When at={d.createdAt} />
        </td>
        <td className="wh-outcome" data-testid="webhook-last-outcome">
          {lastOutcome(d)}
        </td>
        <td>
          <div className="wh-actions">
            <button type="button" aria-expanded={open} aria-controls={detailsId} onClick={onToggle} aria-label={`Details of ${label}`}>
              Details
            </button>
            <button type="button" disabled={busy} onClick={() => void redeliver()} aria-label={`Redeliver ${label}`}>
              Redeliver
            </button>
          </div>
          <span role="status" aria-live="polite">
            {done}
          </span>
          <ErrorBox error={error} />
        </td>
      </tr>
      {open && (
        <tr id={detailsId} className="wh-details">
          <td colSpan={showEndpoint ? 7 : 6}>
            <h3 id={`${detailsId}-attempts`}>Attempts of {label}</h3>
            {d.attemptLog.length === 0 ? (
              <p className="empty">No attempt yet.</p>
            ) : (
              <table className="lines" aria-labelledby={`${detailsId}-attempts`}>
                <thead>
                  <tr>
                    <th scope="col">Started</th>
                    <th scope="col">HTTP status</th>
                    <th scope="col">Result</th>
                    <th scope="col">Latency</th>
                    <th scope="col">Error or response</th>
                  </tr>
                </thead>
                <tbody>
                  {d.attemptLog.map((a, i) => (
                    <tr key={i}>
                      <td>
                        <When at={a.startedAt} />
                      </td>
                      <td>{a.statusCode ?? 'none'}</td>
                      <td>{a.succeeded ? 'succeeded' : 'failed'}</td>
                      <td>{a.latencyMs} ms</td>
                      <td className="wh-outcome">
                        {a.error ?? (a.responseHead ? <code>{a.responseHead}</code> : <span className="muted">empty body</span>)}
                      </td>
                    </tr>
                  ))}
                </tbody>
              </table>
            )}
            <h3 id={`${detailsId}-payload`}>Payload of {label}</h3>
            <div className="scroll wh-payload" tabIndex={0} role="region" aria-labelledby={`${detailsId}-payload`}>
              <pre>{prettyPayload(d.payload)}</pre>
            </div>
          </td>
        </tr>
      )}
    </>
  );
}

function DeliveryLog({
  endpoints,
  filter,
  onFilter,
  deliveries,
  error,
  onRefresh,
  onReplaced,
  headingRef,
}: {
  endpoints: Endpoint[];
  filter: string;
  onFilter: (id: string) => void;
  deliveries: Delivery[] | null;
  error: unknown;
  onRefresh: () => void;
  onReplaced: (d: Delivery) => void;
  headingRef: RefObject<HTMLHeadingElement | null>;
}) {
  const [open, setOpen] = useState<Set<string>>(new Set());
  const urls = new Map(endpoints.map((e) => [e.id, e.url]));
  const showEndpoint = filter === '';
  const toggle = (id: string) =>
    setOpen((s) => {
      const next = new Set(s);
      if (next.has(id)) next.delete(id);
      else next.add(id);
      return next;
    });
  return (
    <section aria-labelledby="webhook-log-title" className="card">
      <h2 id="webhook-log-title" tabIndex={-1} ref={headingRef}>
        Delivery log
      </h2>
      <p>
        Newest first, the last {LOG_LIMIT}. A delivery that fails is tried again on the published schedule (about
        three days); an endpoint that fails every delivery for all of it is disabled. “Redeliver” sends it again now
        with the same <code>webhook-id</code>.
      </p>
      <div className="row">
        <div className="field">
          <label htmlFor="webhook-log-endpoint">Endpoint</label>
          <select id="webhook-log-endpoint" value={filter} onChange={(e) => onFilter(e.target.value)}>
            <option value="">All endpoints</option>
            {endpoints.map((e) => (
              <option key={e.id} value={e.id}>
                {e.url}
              </option>
            ))}
          </select>
        </div>
        <div className="field">
          <button type="button" onClick={onRefresh}>
            Refresh
          </button>
        </div>
      </div>
      <ErrorBox error={error} />
      {deliveries === null ? (
        !error && <p>Loading…</p>
      ) : deliveries.length === 0 ? (
        <p className="empty">No deliveries yet: “Send test” on an endpoint sends one.</p>
      ) : (
        <div className="scroll" tabIndex={0} role="region" aria-label="Webhook deliveries, as a table">
          <table className="keys wh-log">
            <thead>
              <tr>
                <th scope="col">Event</th>
                {showEndpoint && <th scope="col">Endpoint</th>}
                <th scope="col">Status</th>
                <th scope="col">Attempts</th>
                <th scope="col">Created</th>
                <th scope="col">Last attempt</th>
                <th scope="col">Actions</th>
              </tr>
            </thead>
            <tbody>
              {deliveries.map((d) => (
                <DeliveryRows
                  key={d.id}
                  delivery={d}
                  endpointUrl={urls.get(d.endpointId) ?? null}
                  showEndpoint={showEndpoint}
                  open={open.has(d.id)}
                  onToggle={() => toggle(d.id)}
                  onRedelivered={onReplaced}
                />
              ))}
            </tbody>
          </table>
        </div>
      )}
    </section>
  );
}

/** The webhooks page: endpoints, adding one, the secret once, and the delivery log. */
export function Webhooks() {
  const [page, setPage] = useState<WebhooksPageQuery | null>(null);
  const [error, setError] = useState<unknown>(null);
  const [shown, setShown] = useState<ShownSecret | null>(null);
  const [filter, setFilter] = useState('');
  const [deliveries, setDeliveries] = useState<Delivery[] | null>(null);
  const [logError, setLogError] = useState<unknown>(null);
  const endpointsHeading = useRef<HTMLHeadingElement>(null);
  const logHeading = useRef<HTMLHeadingElement>(null);

  const load = useCallback(async () => {
    try {
      setPage(await request(WebhooksPage));
      setError(null);
    } catch (e) {
      setError(e);
    }
  }, []);
  useEffect(() => {
    void load();
  }, [load]);

  const loadLog = useCallback(async () => {
    try {
      const data = await request(WebhookDeliveries, { endpointId: filter || null, limit: LOG_LIMIT });
      setDeliveries(data.webhookDeliveries);
      setLogError(null);
    } catch (e) {
      setLogError(e);
    }
  }, [filter]);
  useEffect(() => {
    void loadLog();
    const timer = window.setInterval(() => void loadLog(), POLL_MS);
    return () => window.clearInterval(timer);
  }, [loadLog]);

  const endpoints = page?.webhookEndpoints ?? [];
  const replace = (endpoint: Endpoint) =>
    setPage((p) =>
      p && {
        ...p,
        webhookEndpoints: p.webhookEndpoints.some((e) => e.id === endpoint.id)
          ? p.webhookEndpoints.map((e) => (e.id === endpoint.id ? endpoint : e))
          : [...p.webhookEndpoints, endpoint],
      },
    );
  const remove = (id: string) => {
    setPage((p) => p && { ...p, webhookEndpoints: p.webhookEndpoints.filter((e) => e.id !== id) });
    setDeliveries((list) => list && list.filter((d) => d.endpointId !== id));
    if (filter === id) setFilter('');
    endpointsHeading.current?.focus();
  };
  const replaceDelivery = (d: Delivery) => {
    setDeliveries((list) => {
      if (filter && d.endpointId !== filter) return list;
      const rest = (list ?? []).filter((x) => x.id !== d.id);
      return [d, ...rest].sort((a, b) => b.createdAt.localeCompare(a.createdAt));
    });
  };
  const dismissSecret = () => {
    setShown(null);
    // The secret is gone from the page; focus goes back to the list.
    window.setTimeout(() => endpointsHeading.current?.focus(), 0);
  };

  return (
    <>
      {shown && <SecretOnce shown={shown} onDone={dismissSecret} />}
      {/* Hidden, not unmounted, while a secret is shown: the form's cleared
          drafts are then stored as cleared. */}
      {page && (
        <div hidden={shown !== null}>
          <AddEndpoint
            eventTypes={page.webhookEventTypes}
            onAdded={(created, secret) => {
              replace(created);
              setShown({ url: created.url, secret, previousUntil: null });
            }}
          />
        </div>
      )}
      <section aria-labelledby="webhook-endpoints-title" className="card">
        <h2 id="webhook-endpoints-title" tabIndex={-1} ref={endpointsHeading}>
          Webhook endpoints
        </h2>
        <p>
          Your events (instances, orders, balance) are sent to these URLs as signed JSON <code>POST</code>s. An
          endpoint with no event types chosen gets all of them.
        </p>
        <ErrorBox error={error} />
        {page === null ? (
          !error && <p>Loading…</p>
        ) : endpoints.length === 0 ? (
          <p className="empty">No webhook endpoints yet.</p>
        ) : (
          <ul className="wh-endpoints">
            {endpoints.map((e) => (
              <EndpointItem
                key={e.id}
                endpoint={e}
                onChanged={replace}
                onDeleted={remove}
                onSecret={(s, endpoint) => {
                  replace(endpoint);
                  setShown(s);
                }}
                onTested={replaceDelivery}
                onShowLog={(id) => {
                  setFilter(id);
                  logHeading.current?.focus();
                }}
              />
            ))}
          </ul>
        )}
      </section>
      <DeliveryLog
        endpoints={endpoints}
        filter={filter}
        onFilter={setFilter}
        deliveries={deliveries}
        error={logError}
        onRefresh={() => void loadLog()}
        onReplaced={replaceDelivery}
        headingRef={logHeading}
      />
    </>
  );
}
