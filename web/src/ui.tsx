import type { ReactNode } from 'react';
import { ApiError, errorText } from './api';

export function Layout({ title, children, actions }: { title: string; children: ReactNode; actions?: ReactNode }) {
  return (
    <>
      <header className="top">
        <span className="brand">gpumarket</span>
        <nav aria-label="Sections">
          <a href="/portal" aria-current={title === 'Host portal' ? 'page' : undefined}>Host portal</a>
          <a href="/billing" aria-current={title === 'Billing' ? 'page' : undefined}>Billing</a>
        </nav>
        <div className="actions">{actions}</div>
      </header>
      <main>
        <h1>{title}</h1>
        {children}
      </main>
    </>
  );
}

/** The header's actions while signed in: who, and "Log out". */
export function SignedIn({ email, onLogOut }: { email: string | null; onLogOut: () => void }) {
  return (
    <>
      <span className="who">{email}</span>
      <button type="button" onClick={onLogOut}>
        Log out
      </button>
    </>
  );
}

/** An error from the API: its message and `extensions.code`. */
export function ErrorBox({ error, except }: { error: unknown; except?: string[] }) {
  if (!error) return null;
  if (error instanceof ApiError) {
    const shown = error.errors.filter((e) => !(e.field && except?.includes(e.field)));
    if (shown.length === 0) return null;
    return (
      <div className="error" role="alert">
        {shown.map((e, i) => (
          <p key={i}>
            {e.message} <code>{e.code}</code>
          </p>
        ))}
      </div>
    );
  }
  return (
    <div className="error" role="alert">
      <p>{errorText(error)}</p>
    </div>
  );
}

/** A labelled input, with the VALIDATION error that names it beside it. */
export function Field({
  id,
  label,
  error,
  field,
  children,
  hint,
}: {
  id: string;
  label: string;
  error: unknown;
  field: string;
  children: ReactNode;
  hint?: string;
}) {
  const mine = error instanceof ApiError ? error.forField(field) : undefined;
  return (
    <div className="field">
      <label htmlFor={id}>{label}</label>
      {children}
      {hint && <small id={`${id}-hint`}>{hint}</small>}
      {mine && (
        <small className="field-error" id={`${id}-error`} role="alert">
          {mine.message} <code>{mine.code}</code>
        </small>
      )}
    </div>
  );
}

export function fieldProps(id: string, error: unknown, field: string, hint?: boolean) {
  const invalid = error instanceof ApiError && !!error.forField(field);
  const described = [hint ? `${id}-hint` : null, invalid ? `${id}-error` : null].filter(Boolean).join(' ');
  return {
    id,
    name: field,
    'aria-invalid': invalid || undefined,
    'aria-describedby': described || undefined,
  };
}

/** A unique key; `crypto.randomUUID` needs a secure context. */
export function newKey(): string {
  if (typeof crypto !== 'undefined' && 'randomUUID' in crypto) return crypto.randomUUID();
  return `k-${Date.now().toString(36)}-${Math.random().toString(36).slice(2)}`;
}

/** Above a log-in form after the API stopped accepting the session's token. */
export function SessionExpired() {
  return (
    <p role="status" className="expired" data-testid="session-expired">
      Your session has expired. Log in again: what you typed is kept.
    </p>
  );
}
