import { useEffect, useState, type FormEvent } from 'react';
import { request } from '../api';
import type { PayoutAccountFieldsFragment } from '../gql/graphql';
import { CreatePayoutAccount, CreatePayoutOnboardingLink, MyPayoutAccount } from '../operations';
import { useDraft } from '../session';
import { ErrorBox, Field, fieldProps } from '../ui';

type Account = PayoutAccountFieldsFragment;

const TRANSFERS: Record<string, string> = {
  active: 'Active: payouts can be transferred',
  pending: 'Pending: Stripe is reviewing the account',
  inactive: 'Inactive: Stripe needs more details',
};

/**
 * Where payouts go: the host's Stripe connected account, and creating it
 * when there is none. `defaults` fill in the creation form once known
 * (undefined while the host profile loads).
 */
export function PayoutAccountCard({ defaults }: { defaults: { country: string; email: string } | undefined }) {
  const [account, setAccount] = useState<Account | null | undefined>(undefined);
  const [error, setError] = useState<unknown>(null);

  useEffect(() => {
    request(MyPayoutAccount)
      .then((d) => setAccount(d.payoutAccount))
      .catch(setError);
  }, []);

  return (
    <section aria-labelledby="payout-title" className="card">
      <h2 id="payout-title">Payout account</h2>
      <p className="muted">
        Your earnings are transferred to a Stripe connected account in your name, and from there to your bank.
      </p>
      {error ? (
        <ErrorBox error={error} />
      ) : account === undefined || defaults === undefined ? (
        <p>Loading…</p>
      ) : account === null ? (
        <CreatePayoutAccountForm key={defaults.country} defaults={defaults} onCreated={setAccount} />
      ) : (
        <PayoutAccountState account={account} />
      )}
    </section>
  );
}

function PayoutAccountState({ account: a }: { account: Account }) {
  const todo = [
    !a.detailsSubmitted && 'Submit your identity and bank details in Stripe’s onboarding for this account.',
    a.transfersStatus !== 'active' &&
      `Wait for Stripe to activate transfers (now ${a.transfersStatus}): payouts wait until then.`,
    !a.payoutsEnabled && 'Wait for Stripe to enable payouts from the account to your bank.',
  ].filter((x): x is string => !!x);
  return (
    <>
      <dl className="facts" data-testid="payout-account">
        <div>
          <dt>Stripe account</dt>
          <dd data-testid="payout-stripe-id">
            <code>{a.stripeAccountId}</code>
          </dd>
        </div>
        <div>
          <dt>Account country</dt>
          <dd data-testid="payout-country">{a.country}</dd>
        </div>
        <div>
          <dt>Email at Stripe</dt>
          <dd data-testid="payout-email">{a.email ?? 'none given'}</dd>
        </div>
        <div>
          <dt>Transfers</dt>
          <dd data-testid="payout-transfers">{TRANSFERS[a.transfersStatus] ?? a.transfersStatus}</dd>
        </div>
        <div>
          <dt>Details submitted</dt>
          <dd data-testid="payout-details">{a.detailsSubmitted ? 'Yes' : 'No'}</dd>
        </div>
        <div>
          <dt>Payouts to your bank</dt>
          <dd data-testid="payout-enabled">{a.payoutsEnabled ? 'Enabled' : 'Not enabled yet'}</dd>
        </div>
        <div>
          <dt>Created</dt>
          <dd>{new Date(a.createdAtUtc).toLocaleString()}</dd>
        </div>
      </dl>
      <p className="label">What you still need to do</p>
      {todo.length === 0 ? (
        <p data-testid="payout-todo">Nothing: earnings are paid out here once they reach the payout minimum.</p>
      ) : (
        <ul className="missing" data-testid="payout-todo">
          {todo.map((t) => (
            <li key={t}>{t}</li>
          ))}
        </ul>
      )}
      {!a.detailsSubmitted && <OnboardingButton />}
    </>
  );
}

/** Opens Stripe's hosted onboarding; Stripe sends the browser back here. */
function OnboardingButton() {
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<unknown>(null);
  const expired = new URLSearchParams(window.location.search).get('payouts') === 'expired';
  async function go() {
    setBusy(true);
    setError(null);
    try {
      // A link is single use and expires within minutes: ask for it on click.
      const { createPayoutOnboardingLink: link } = await request(CreatePayoutOnboardingLink);
      window.location.assign(link.url);
    } catch (e) {
      setError(e);
      setBusy(false);
    }
  }
  return (
    <div className="actions">
      {expired && <p role="status">That onboarding link had expired: open a new one.</p>}
      <button type="button" onClick={() => void go()} disabled={busy}>
        {busy ? 'Opening Stripe…' : 'Continue onboarding at Stripe'}
      </button>
      {error ? <ErrorBox error={error} /> : null}
    </div>
  );
}

function CreatePayoutAccountForm({
  defaults,
  onCreated,
}: {
  defaults: { country: string; email: string };
  onCreated: (account: Account) => void;
}) {
  const [country, setCountry] = useDraft('payout.country', defaults.country);
  const [email, setEmail] = useDraft('payout.email', defaults.email);
  const [error, setError] = useState<unknown>(null);
  const [busy, setBusy] = useState(false);

  const submit = async (event: FormEvent) => {
    event.preventDefault();
    setBusy(true);
    setError(null);
    try {
      const data = await request(CreatePayoutAccount, {
        country: country.trim().toUpperCase(),
        email: email.trim() === '' ? null : email.trim(),
      });
      onCreated(data.createPayoutAccount);
    } catch (e) {
      setError(e);
    } finally {
      setBusy(false);
    }
  };

  return (
    <>
      <p data-testid="payout-none">
        No payout account yet: create one to be paid. Stripe then needs your identity and bank details.
      </p>
      <form onSubmit={submit} noValidate className="grid">
        <Field id="payout-country" label="Account country" error={error} field="country" hint="Two letters, e.g. DE.">
          <input
            {...fieldProps('payout-country', error, 'country', true)}
            autoComplete="country"
            required
            value={country}
            onChange={(e) => setCountry(e.target.value)}
          />
        </Field>
        <Field id="payout-email" label="Email for Stripe (optional)" error={error} field="email">
          <input
            {...fieldProps('payout-email', error, 'email')}
            type="email"
            autoComplete="email"
            value={email}
            onChange={(e) => setEmail(e.target.value)}
          />
        </Field>
        <div className="wide">
          <ErrorBox error={error} except={['country', 'email']} />
          <button type="submit" className="primary" disabled={busy}>
            Create payout account
          </button>
          <p className="muted">Trying again is safe: the API returns the same account for a host.</p>
        </div>
      </form>
    </>
  );
}
