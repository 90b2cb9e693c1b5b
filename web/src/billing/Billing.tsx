import { Layout } from '../ui';

/** A placeholder: the billing front end is the next slice of issue #7. */
export function Billing() {
  return (
    <Layout title="Billing">
      <section aria-labelledby="billing-soon">
        <h2 id="billing-soon">Coming next</h2>
        <p>This page will show a renter's balance and its history, top-ups by card, invoices to download, and spend
          limits; for a host, earnings per machine and payouts. All of it from the public GraphQL API.</p>
        <p>
          Hosts: the <a href="/portal">host portal</a> is where you register and list machines.
        </p>
      </section>
    </Layout>
  );
}
