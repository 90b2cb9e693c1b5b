// The signed-in user, shared by the portal and the billing dashboard: the JWT
// (kept by `api.ts` in sessionStorage) and the email shown beside "Log out".
// When the API drops the token (expired or revoked JWT), the session ends with
// `expired` set, and the forms' drafts (`useDraft`) survive the new log-in.
import { useCallback, useEffect, useState, type Dispatch, type SetStateAction } from 'react';
import { getToken, setToken, SESSION_EXPIRED_EVENT } from './api';

const EMAIL_KEY = 'gpumarket.email';
const DRAFT_PREFIX = 'gpumarket.draft.';

export interface Session {
  token: string | null;
  email: string | null;
  /** The session ended because the API no longer accepted the token. */
  expired: boolean;
  /** The email of the session that expired, to fill in the log-in form. */
  expiredEmail: string | null;
  /** Keeps the session of a sign-up or log-in. */
  onAuth: (token: string, email: string) => void;
  /** Logs out: forgets the session and the forms' drafts. */
  logOut: () => void;
}

function clearDrafts() {
  for (let i = sessionStorage.length - 1; i >= 0; i--) {
    const key = sessionStorage.key(i);
    if (key?.startsWith(DRAFT_PREFIX)) sessionStorage.removeItem(key);
  }
}

export function useSession(): Session {
  const [token, setTok] = useState<string | null>(getToken());
  const [email, setEmail] = useState<string | null>(sessionStorage.getItem(EMAIL_KEY));
  const [expired, setExpired] = useState(false);
  const [expiredEmail, setExpiredEmail] = useState<string | null>(null);
  const onAuth = (newToken: string, newEmail: string) => {
    setToken(newToken);
    sessionStorage.setItem(EMAIL_KEY, newEmail);
    setTok(newToken);
    setEmail(newEmail);
    setExpired(false);
  };
  const logOut = useCallback(() => {
    setToken(null);
    sessionStorage.removeItem(EMAIL_KEY);
    clearDrafts();
    setTok(null);
    setEmail(null);
    setExpired(false);
  }, []);
  useEffect(() => {
    const onExpired = () => {
      setExpiredEmail(sessionStorage.getItem(EMAIL_KEY));
      sessionStorage.removeItem(EMAIL_KEY);
      setTok(null);
      setEmail(null);
      setExpired(true);
    };
    window.addEventListener(SESSION_EXPIRED_EVENT, onExpired);
    return () => window.removeEventListener(SESSION_EXPIRED_EVENT, onExpired);
  }, []);
  return { token, email, expired, expiredEmail, onAuth, logOut };
}

/**
 * A form field's state, kept in sessionStorage under `key` so that it
 * survives the form being unmounted when the session expires. Drafts are
 * dropped on log-out.
 */
export function useDraft(key: string, initial: string): [string, Dispatch<SetStateAction<string>>] {
  const storageKey = DRAFT_PREFIX + key;
  const [value, setValue] = useState<string>(() => sessionStorage.getItem(storageKey) ?? initial);
  useEffect(() => {
    if (value === initial) sessionStorage.removeItem(storageKey);
    else sessionStorage.setItem(storageKey, value);
  }, [storageKey, value, initial]);
  return [value, setValue];
}
