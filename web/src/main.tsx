import { StrictMode } from 'react';
import { createRoot } from 'react-dom/client';
import { Portal } from './portal/Portal';
import { Billing } from './billing/Billing';
import './styles.css';

// The gateway serves this app at /portal and /billing; the path picks the page.
const page = window.location.pathname.startsWith('/billing') ? <Billing /> : <Portal />;

createRoot(document.getElementById('root')!).render(<StrictMode>{page}</StrictMode>);
