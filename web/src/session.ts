// The signed-in user, shared by the portal and the billing dashboard: the JWT
// (kept by `api.ts` in sessionStorage) and the email shown beside "Log out".
import { useCallback, useState } from 'react';
import { getToken, setToken } from './api';

const EMAIL_KEY = 'gpumarket.email';

export interface Session {
  token: string | null;
  email: string | null;
  /** Keeps the session of a sign-up or log-in. */
  onAuth: (token: string, email: string) => void;
  /** Forgets the session (also when the API has dropped the token). */
  logOut: () => void;
}

export function useSession(): Session {
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
  return { token, email, onAuth, logOut };
}
