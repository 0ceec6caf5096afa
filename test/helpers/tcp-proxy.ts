// The proxy lives in bench/ (dist/bench is compiled from bench/ only), so the failover bench drives the same one.
export { startTcpProxy, type TcpProxy } from '../../bench/tcp-proxy.js';
