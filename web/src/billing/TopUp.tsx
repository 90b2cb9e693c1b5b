// Card top-ups of the renter's balance (issue #7): the amount goes to
// `createTopUp`, the payment is taken by Stripe's Payment Element with the
// client secret it returns, and the balance rises only when billing receives
// Stripe's signed `payment_intent.succeeded` webhook, so after paying the
// card polls the top-up until it is credited. Stripe.js is loaded with the
// publishable key from the public `platform` query, only when this card is
// shown (the `pure` entry point does not inject the script on import).
import { useCallback, useEffect, useRef, useState, type FormEvent } from 'react';
import { loadStripe } from '@stripe/stripe-js/pure';
import type { Stripe, StripeElements } from '@stripe/stripe-js';
import { request } from '../api';
import type { TopUpCreateMutation, TopUpStateQuery } from '../gql/graphql';
import { formatMoney } from '../money';
import { ErrorBox, Field, fieldProps, newKey } from '../ui';
import { useDraft } from '../session';
import { TopUpCreate, TopUpPlatform, TopUpState } from './topup-operations';

/** How often the balance and top-ups are asked while a credit is awaited. */
const WAIT_POLL_MS = 1000;
/** How long to wait for Stripe's webhook before saying it is late. */
const WAIT_LIMIT_MS = 120_000;

type Created = TopUpCreateMutation['createTopUp'];
type Listed = TopUpStateQuery['topUps'][number];

/** Where one top-up stands on this page. */
type Step =
  | { kind: 'amount' }
  | { kind: 'pay'; topUp: Created; stripe: Stripe; elements: StripeElements }
  | { kind: 'waiting'; topUp: Created; since: number }
  | { kind: 'done'; topUp: Listed; balance: string; currency: string }
  | { kind: 'late'; topUp: Created };

export function TopUpCard() {
  const [publishableKey, setPublishableKey] = useState<string | null | undefined>(undefined);
  const [renter, setRenter] = useState(true);
  const [termsError, setTermsError] = useState<unknown>(null);
  const [state, setState] = useState<TopUpStateQuery | null>(null);
  const [stateError, setStateError] = useState<unknown>(null);

  const loadState = useCallback(async () => {
    try {
      const s = await request(TopUpState);
      setState(s);
      setStateError(null);
      return s;
    } catch (e) {
      setStateError(e);
      return null;
    }
  }, []);

  useEffect(() => {
    let live = true;
    request(TopUpPlatform)
      .then((d) => {
        if (!live) return;
        setPublishableKey(d.platform.stripePublishableKey ?? null);
        setRenter(d.me.tenantRoles.includes('RENTER'));
      })
      .catch((e: unknown) => live && setTermsError(e));
    void loadState();
    return () => {
      live = false;
    };
  }, [loadState]);

  // Hosts and operators see billing too; topping up is for renters.
  if (!renter) return null;
  return (
    <section aria-labelledby="topup-title" className="card" data-testid="topup-card">
      <h2 id="topup-title">Top up by card</h2>
      <ErrorBox error={termsError} />
      {publishableKey === undefined ? (
        !termsError && <p>Loading…</p>
      ) : publishableKey === null ? (
        <p role="status" className="billing-muted" data-testid="topup-not-configured">
          Card top-ups are not configured on this deployment (no Stripe publishable key). Ask the operator
          for credit instead.
        </p>
      ) : (
        <TopUpFlow publishableKey={publishableKey} loadState={loadState} />
      )}
      <TopUpHistory state={state} error={stateError} />
    </section>
  );
}

function TopUpFlow({
  publishableKey,
  loadState,
}: {
  publishableKey: string;
  loadState: () => Promise<TopUpStateQuery | null>;
}) {
  // Kept in sessionStorage: an expired session sends the renter to log in
  // again without losing the amount typed.
  const [amount, setAmount] = useDraft('billing.topup.amount', '');
  // One key per attempt: a retry of the same amount after a failure meets
  // the same top-up (and PaymentIntent); a new amount or a finished top-up
  // starts a new attempt.
  const [attemptKey, setAttemptKey] = useState(newKey);
  const [step, setStep] = useState<Step>({ kind: 'amount' });
  const [error, setError] = useState<unknown>(null);
  const [busy, setBusy] = useState(false);
  const stripePromise = useRef<Promise<Stripe | null> | null>(null);

  const stripe = () => {
    stripePromise.current ??= loadStripe(publishableKey);
    return stripePromise.current;
  };

  const start = async (event: FormEvent) => {
    event.preventDefault();
    setBusy(true);
    setError(null);
    try {
      const topUp = (await request(TopUpCreate, { amount: amount.trim(), idempotencyKey: attemptKey }))
        .createTopUp;
      if (!topUp.clientSecret) throw new Error('the API returned no client secret for this top-up');
      const s = await stripe();
      if (!s) throw new Error('Stripe.js did not load');
      const elements = s.elements({ clientSecret: topUp.clientSecret });
      setStep({ kind: 'pay', topUp, stripe: s, elements });
      // The list shows the new, unpaid top-up too.
      void loadState();
    } catch (e) {
      setError(e);
    } finally {
      setBusy(false);
    }
  };

  const pay = async () => {
    if (step.kind !== 'pay') return;
    setBusy(true);
    setError(null);
    try {
      const result = await step.stripe.confirmPayment({
        elements: step.elements,
        // Only for payment methods that must leave the page (bank redirects).
        confirmParams: { return_url: window.location.href },
        redirect: 'if_required',
      });
      if (result.error) {
        setError(new Error(result.error.message ?? 'the payment was not accepted'));
        return;
      }
      setStep({ kind: 'waiting', topUp: step.topUp, since: Date.now() });
    } catch (e) {
      setError(e);
    } finally {
      setBusy(false);
    }
  };

  const again = () => {
    setStep({ kind: 'amount' });
    setAmount('');
    setAttemptKey(newKey());
    setError(null);
  };

  // After paying: poll until billing has credited the top-up.
  useEffect(() => {
    if (step.kind !== 'waiting') return;
    let live = true;
    const check = async () => {
      const s = await loadState();
      if (!live || !s) return;
      const mine = s.topUps.find((t) => t.id === step.topUp.id);
      if (mine?.status === 'succeeded') {
        setStep({ kind: 'done', topUp: mine, balance: s.balance.amount, currency: s.balance.currency });
      } else if (Date.now() - step.since > WAIT_LIMIT_MS) {
        setStep({ kind: 'late', topUp: step.topUp });
      }
    };
    const timer = window.setInterval(() => void check(), WAIT_POLL_MS);
    void check();
    return () => {
      live = false;
      window.clearInterval(timer);
    };
  }, [step, loadState]);

  if (step.kind === 'pay') {
    return (
      <div data-testid="topup-pay">
        <p>
          Pay <strong>{formatMoney(step.topUp.amount, step.topUp.currency)}</strong> by card. The balance rises once
          Stripe confirms the payment.
        </p>
        <PaymentElement elements={step.elements} />
        <ErrorBox error={error} />
        <div>
          <button type="button" className="primary" onClick={() => void pay()} disabled={busy}>
            Pay {formatMoney(step.topUp.amount, step.topUp.currency)}
          </button>{' '}
          <button type="button" onClick={again} disabled={busy}>
            Cancel
          </button>
        </div>
      </div>
    );
  }
  if (step.kind === 'waiting') {
    return (
      <p role="status" data-testid="topup-status">
        Payment of {formatMoney(step.topUp.amount, step.topUp.currency)} confirmed by Stripe; waiting for the credit
        to reach your balance…
      </p>
    );
  }
  if (step.kind === 'late') {
    return (
      <div>
        <p role="status" data-testid="topup-status">
          Stripe has not yet reported the payment of {formatMoney(step.topUp.amount, step.topUp.currency)}. It is
          credited as soon as it does; the list below shows its status.
        </p>
        <button type="button" onClick={again}>
          New top-up
        </button>
      </div>
    );
  }
  if (step.kind === 'done') {
    return (
      <div>
        <p role="status" data-testid="topup-status">
          Top-up of {formatMoney(step.topUp.amount, step.topUp.currency)} <strong>succeeded</strong>. Balance now{' '}
          <strong data-testid="topup-balance">{formatMoney(step.balance, step.currency)}</strong>.
        </p>
        <button type="button" onClick={again}>
          New top-up
        </button>
      </div>
    );
  }
  return (
    <form onSubmit={start} noValidate aria-describedby="topup-intro">
      <p id="topup-intro">Add credit to your balance; rentals are charged against it.</p>
      <Field id="topup-amount" label="Amount" error={error} field="amount" hint="In your balance's currency, e.g. 25.00">
        <input
          {...fieldProps('topup-amount', error, 'amount', true)}
          type="text"
          inputMode="decimal"
          autoComplete="off"
          value={amount}
          onChange={(e) => {
            setAmount(e.target.value);
            setAttemptKey(newKey());
          }}
        />
      </Field>
      <ErrorBox error={error} except={['amount']} />
      <button type="submit" className="primary" disabled={busy}>
        {busy ? 'Starting…' : 'Continue to payment'}
      </button>
    </form>
  );
}

/** Stripe's Payment Element, mounted while this is shown. */
function PaymentElement({ elements }: { elements: StripeElements }) {
  const box = useRef<HTMLDivElement>(null);
  useEffect(() => {
    const node = box.current;
    if (!node) return;
    const element = elements.create('payment');
    element.mount(node);
    return () => element.destroy();
  }, [elements]);
  return <div ref={box} className="topup-element" data-testid="topup-payment-element" />;
}

function TopUpHistory({ state, error }: { state: TopUpStateQuery | null; error: unknown }) {
  return (
    <>
      <h3 id="topup-history-title">Past top-ups</h3>
      <ErrorBox error={error} />
      {state === null ? (
        !error && <p>Loading…</p>
      ) : state.topUps.length === 0 ? (
        <p className="billing-empty">No top-ups yet.</p>
      ) : (
        <div className="scroll" tabIndex={0} role="region" aria-labelledby="topup-history-title">
          <table className="billing-table" data-testid="topup-list">
            <thead>
              <tr>
                <th scope="col">Started</th>
                <th scope="col">Amount</th>
                <th scope="col">Status</th>
                <th scope="col">Credited</th>
              </tr>
            </thead>
            <tbody>
              {state.topUps.map((t) => (
                <tr key={t.id} data-topup-id={t.id}>
                  <td>{new Date(t.createdAtUtc).toLocaleString()}</td>
                  <td className="num">{formatMoney(t.amount, t.currency)}</td>
                  <td>{statusLabel(t.status)}</td>
                  <td>{t.succeededAtUtc ? new Date(t.succeededAtUtc).toLocaleString() : '—'}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </>
  );
}

/** Stripe's PaymentIntent statuses in words (the raw status stays visible). */
function statusLabel(status: string): string {
  switch (status) {
    case 'succeeded':
      return 'succeeded';
    case 'requires_payment_method':
    case 'requires_confirmation':
    case 'creating':
      return 'not paid';
    case 'requires_action':
      return 'needs your action';
    case 'processing':
      return 'processing';
    case 'canceled':
      return 'canceled';
    default:
      return status;
  }
}

