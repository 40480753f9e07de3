// A TCP proxy that holds every chunk `oneWayMs` before passing it on, in each direction: a
// network between the client and PostgreSQL on one machine. Run as its own process, so its work
// is not charged to the client measured. Chunks keep their order (timers of one duration fire in
// the order they were set). Usage: node delay-proxy.mjs <target-port> <one-way-ms>; prints the
// address it listens on.
import { connect, createServer } from 'node:net';

const [targetPort, oneWayMs] = process.argv.slice(2).map(Number);
const delayed = (from, to) => {
  from.on('data', (chunk) => setTimeout(() => to.write(chunk), oneWayMs));
  from.on('end', () => setTimeout(() => to.end(), oneWayMs));
  from.on('error', () => to.destroy());
};
const server = createServer({ noDelay: true }, (client) => {
  const upstream = connect({ host: '127.0.0.1', port: targetPort, noDelay: true });
  delayed(client, upstream);
  delayed(upstream, client);
});
server.listen(0, '127.0.0.1', () => console.log(`tcp://127.0.0.1:${server.address().port}`));
process.on('SIGTERM', () => process.exit(0));
