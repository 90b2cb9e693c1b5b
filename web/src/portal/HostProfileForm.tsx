import { useState, type FormEvent } from 'react';
import { request } from '../api';
import type { HostProfileFieldsFragment } from '../gql/graphql';
import { UpdateHostProfile } from '../operations';
import { useDraft } from '../session';
import { ErrorBox, Field, fieldProps } from '../ui';

type Profile = HostProfileFieldsFragment;

const FIELDS = ['legalName', 'country', 'payoutCurrency'];

const VERIFICATION: Record<Profile['verification'], { label: string; meaning: string }> = {
  UNVERIFIED: {
    label: 'Unverified',
    meaning: 'An operator reviews the profile once it is complete; their reason is shown here.',
  },
  VERIFIED: { label: 'Verified', meaning: 'An operator has verified this host.' },
  SUSPENDED: {
    label: 'Suspended',
    meaning: 'An operator has suspended this host; the reason says what to change.',
  },
};

/**
 * The host's profile (legal name, country, payout currency) and its
 * verification by an operator. `profile` is null when the API has none for
 * the host, undefined while it loads.
 */
export function HostProfileCard({
  profile,
  error,
  onSaved,
}: {
  profile: Profile | null | undefined;
  error: unknown;
  onSaved: (profile: Profile) => void;
}) {
  const [savedAt, setSavedAt] = useState<string | null>(null);
  return (
    <section aria-labelledby="profile-title" className="card">
      <h2 id="profile-title">Host profile</h2>
      {profile === undefined ? (
        error ? <ErrorBox error={error} /> : <p>Loading…</p>
      ) : (
        <>
          <VerificationState profile={profile} />
          <HostProfileForm
            profile={profile}
            onSaved={(p) => {
              setSavedAt(p.updatedAtUtc);
              onSaved(p);
            }}
          />
        </>
      )}
      <p role="status" className="muted" data-testid="profile-saved">
        {savedAt && `Profile saved (${new Date(savedAt).toLocaleString()}).`}
      </p>
    </section>
  );
}

function VerificationState({ profile }: { profile: Profile | null }) {
  const state = VERIFICATION[profile?.verification ?? 'UNVERIFIED'];
  const missing = [
    !profile?.legalName && 'the legal name',
    !profile?.country && 'the country',
    !profile?.payoutCurrency && 'the payout currency',
  ].filter((x): x is string => !!x);
  return (
    <>
      <dl className="facts">
        <div>
          <dt>Verification</dt>
          <dd data-testid="verification">{state.label}</dd>
        </div>
        <div>
          <dt>Operator's reason</dt>
          <dd data-testid="verification-reason">{profile?.verificationReason ?? 'none given'}</dd>
        </div>
        {profile && (
          <div>
            <dt>Last changed</dt>
            <dd>{new Date(profile.updatedAtUtc).toLocaleString()}</dd>
          </div>
        )}
      </dl>
      <p className="muted">{state.meaning}</p>
      {missing.length > 0 && (
        <p data-testid="profile-missing">Still missing for verification: {missing.join(', ')}.</p>
      )}
    </>
  );
}

function HostProfileForm({ profile, onSaved }: { profile: Profile | null; onSaved: (profile: Profile) => void }) {
  const [legalName, setLegalName] = useDraft('profile.legalName', profile?.legalName ?? '');
  const [country, setCountry] = useDraft('profile.country', profile?.country ?? '');
  const [payoutCurrency, setPayoutCurrency] = useDraft('profile.payoutCurrency', profile?.payoutCurrency ?? '');
  const [error, setError] = useState<unknown>(null);
  const [busy, setBusy] = useState(false);

  const submit = async (event: FormEvent) => {
    event.preventDefault();
    setBusy(true);
    setError(null);
    try {
      const data = await request(UpdateHostProfile, {
        input: {
          legalName: legalName.trim(),
          country: country.trim().toUpperCase(),
          payoutCurrency: payoutCurrency.trim().toUpperCase(),
        },
      });
      const saved = data.updateHostProfile;
      // The saved values (as the API normalized them) become both the inputs
      // and the drafts' baseline, so no draft outlives the save.
      setLegalName(saved.legalName ?? '');
      setCountry(saved.country ?? '');
      setPayoutCurrency(saved.payoutCurrency ?? '');
      onSaved(saved);
    } catch (e) {
      setError(e);
    } finally {
      setBusy(false);
    }
  };

  return (
    <form onSubmit={submit} noValidate className="grid">
      <Field id="profile-legal-name" label="Legal name" error={error} field="legalName" hint="As on your tax records.">
        <input
          {...fieldProps('profile-legal-name', error, 'legalName', true)}
          autoComplete="organization"
          required
          value={legalName}
          onChange={(e) => setLegalName(e.target.value)}
        />
      </Field>
      <Field id="profile-country" label="Country" error={error} field="country" hint="Two letters (ISO 3166-1), e.g. DE.">
        <input
          {...fieldProps('profile-country', error, 'country', true)}
          autoComplete="country"
          required
          value={country}
          onChange={(e) => setCountry(e.target.value)}
        />
      </Field>
      <Field
        id="profile-currency"
        label="Payout currency"
        error={error}
        field="payoutCurrency"
        hint="Three letters (ISO 4217), e.g. EUR."
      >
        <input
          {...fieldProps('profile-currency', error, 'payoutCurrency', true)}
          required
          value={payoutCurrency}
          onChange={(e) => setPayoutCurrency(e.target.value)}
        />
      </Field>
      <div className="wide">
        <ErrorBox error={error} except={FIELDS} />
        <button type="submit" className="primary" disabled={busy}>
          Save host profile
        </button>
      </div>
    </form>
  );
}
