import { useEffect, useRef, useState } from 'react';

export interface Issued {
  machineId: string;
  machineName: string;
  token: string;
}

/** The agent's install command with its token: shown once, then forgotten. */
export function TokenOnce({ issued, onDone }: { issued: Issued; onDone: () => void }) {
  const command = `gpumarket agent --machine-id ${issued.machineId} --token ${issued.token}`;
  const [copied, setCopied] = useState<'yes' | 'no' | null>(null);
  const heading = useRef<HTMLHeadingElement>(null);

  useEffect(() => heading.current?.focus(), []);

  const copy = async () => {
    try {
      await navigator.clipboard.writeText(command);
      setCopied('yes');
    } catch {
      setCopied('no');
    }
  };

  return (
    <section aria-labelledby="token-title" className="card notice">
      <h2 id="token-title" tabIndex={-1} ref={heading}>
        {issued.machineName} is registered: install its agent
      </h2>
      <p>
        Run this on the machine. <strong>The token is shown only this once</strong>; if you lose it, rotate the
        machine's agent token.
      </p>
      <label htmlFor="install-command">Agent install command</label>
      <div className="copy">
        <input id="install-command" readOnly value={command} onFocus={(e) => e.target.select()} />
        <button type="button" onClick={copy}>
          Copy
        </button>
      </div>
      <p role="status" aria-live="polite">
        {copied === 'yes' && 'Copied to the clipboard.'}
        {copied === 'no' && 'Copying was refused by the browser: select the command and copy it.'}
      </p>
      <button type="button" className="primary" onClick={onDone}>
        I have saved the token
      </button>
    </section>
  );
}
