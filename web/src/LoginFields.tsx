import { Field, fieldProps } from './ui';

/**
 * The email and password inputs of a log-in (both pages) or a sign-up (the
 * portal, `newPassword`: a hint and the new-password autocomplete), with the
 * VALIDATION errors that name them. The ids are `<idPrefix>-email` and
 * `<idPrefix>-password`.
 */
export function LoginFields({
  idPrefix,
  email,
  password,
  onEmail,
  onPassword,
  error,
  newPassword = false,
}: {
  idPrefix: string;
  email: string;
  password: string;
  onEmail: (value: string) => void;
  onPassword: (value: string) => void;
  error: unknown;
  newPassword?: boolean;
}) {
  const emailId = `${idPrefix}-email`;
  const passwordId = `${idPrefix}-password`;
  return (
    <>
      <Field id={emailId} label="Email" error={error} field="email">
        <input
          {...fieldProps(emailId, error, 'email')}
          type="email"
          autoComplete="email"
          required
          value={email}
          onChange={(e) => onEmail(e.target.value)}
        />
      </Field>
      <Field
        id={passwordId}
        label="Password"
        error={error}
        field="password"
        hint={newPassword ? 'At least 8 characters.' : undefined}
      >
        <input
          {...fieldProps(passwordId, error, 'password', newPassword)}
          type="password"
          autoComplete={newPassword ? 'new-password' : 'current-password'}
          required
          value={password}
          onChange={(e) => onPassword(e.target.value)}
        />
      </Field>
    </>
  );
}
