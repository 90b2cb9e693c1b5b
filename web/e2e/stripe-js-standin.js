// A stand-in for Stripe.js (https://js.stripe.com/<version>/stripe.js) in the
// browser tests, where Chromium cannot reach js.stripe.com. topup.test.mjs
// serves it for every js.stripe.com request (Playwright's page.route), with
// __STRIPE_API_BASE__ replaced by the Stripe test double's base URL
// (libs/stripe-double, started by web/e2e/run.sh).
//
// It implements only what the billing page calls: `Stripe(publishableKey)`,
// `stripe.elements({ clientSecret })`, `elements.create('payment')` with
// `mount`/`unmount`/`destroy`/`on`, and `stripe.confirmPayment({ elements,
// redirect: 'if_required' })`. The Payment Element is a plain note: there
// are no card fields and no iframe. Confirming calls the double as Stripe.js
// calls Stripe: `POST /v1/payment_intents/{id}/confirm`, a form with the
// publishable key (`key`) and the `client_secret`; the double marks the
// PaymentIntent succeeded and sends the signed webhook, so the money path
// after the click is the real one.
(function () {
  'use strict';
  var API = '__STRIPE_API_BASE__';

  /** @param {string} publishableKey */
  function Stripe(publishableKey) {
    if (typeof publishableKey !== 'string' || publishableKey.indexOf('pk_') !== 0) {
      throw new Error('IntegrationError: Stripe() needs a publishable key (pk_...)');
    }

    /** @param {{ clientSecret?: string }} options */
    function elements(options) {
      var clientSecret = options && options.clientSecret;
      if (!clientSecret) throw new Error('IntegrationError: this stand-in needs elements({ clientSecret })');
      return {
        _clientSecret: clientSecret,
        /** @param {string} type */
        create: function (type) {
          if (type !== 'payment') throw new Error('stand-in Stripe.js: only the payment element');
          /** @type {HTMLElement | null} */
          var node = null;
          var element = {
            /** @param {string | HTMLElement} target */
            mount: function (target) {
              var parent = typeof target === 'string' ? document.querySelector(target) : target;
              if (!parent) throw new Error('IntegrationError: mount target not found');
              node = document.createElement('div');
              node.setAttribute('data-stripe-standin', 'payment');
              var note = document.createElement('p');
              note.textContent = 'Card details (Stripe.js stand-in for the browser tests: every payment succeeds)';
              node.appendChild(note);
              parent.appendChild(node);
            },
            unmount: function () {
              if (node && node.parentNode) node.parentNode.removeChild(node);
              node = null;
            },
            destroy: function () {
              element.unmount();
            },
            on: function () {
              return element;
            },
          };
          return element;
        },
      };
    }

    /** @param {{ elements?: { _clientSecret: string }, clientSecret?: string, confirmParams?: { return_url?: string } }} options */
    async function confirmPayment(options) {
      var secret = options.clientSecret || (options.elements && options.elements._clientSecret);
      if (!secret) throw new Error('IntegrationError: confirmPayment needs elements or a clientSecret');
      var id = secret.split('_secret_')[0];
      var form = new URLSearchParams();
      form.set('key', publishableKey);
      form.set('client_secret', secret);
      form.set('expected_payment_method_type', 'card');
      if (options.confirmParams && options.confirmParams.return_url) form.set('return_url', options.confirmParams.return_url);
      var res;
      try {
        res = await fetch(API + 'v1/payment_intents/' + encodeURIComponent(id) + '/confirm', { method: 'POST', body: form });
      } catch (e) {
        return { error: { type: 'api_connection_error', message: 'cannot reach Stripe: ' + String(e) } };
      }
      var body = await res.json();
      if (!res.ok) return { error: body.error };
      return { paymentIntent: body };
    }

    return {
      elements: elements,
      confirmPayment: confirmPayment,
      // @stripe/stripe-js registers itself with the script it loaded.
      _registerWrapper: function () {},
    };
  }

  // The release train @stripe/stripe-js expects, so it does not warn.
  Stripe.version = 'endive';
  // @ts-ignore -- a global, as the real script defines it
  window.Stripe = Stripe;
})();
