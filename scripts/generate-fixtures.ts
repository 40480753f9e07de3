/**
 * Generates the sandbox's company data set and the demo input, deterministically.
 *
 *   npm run fixtures            (writes fixtures/companies.jsonl and fixtures/companies.csv)
 *
 * The output is committed; rerunning with the same SEED reproduces it byte for byte, so a diff
 * after a change to this script shows exactly what the change did to the data.
 */
import { writeFileSync } from 'node:fs';
import { domainToASCII } from 'node:url';
import type { FixtureCompany } from '../src/sandbox/directory.js';
import { mulberry32 } from '../src/sandbox/random.js';

const SEED = 20261121;
const COMPANY_COUNT = 6000;

const rand = mulberry32(SEED);
const pick = <T>(items: readonly T[]): T => items[Math.floor(rand() * items.length)] as T;
const chance = (p: number): boolean => rand() < p;
const int = (lo: number, hi: number): number => lo + Math.floor(rand() * (hi - lo + 1));

interface Country {
  name: string;
  suffixes: readonly string[];
  cities: readonly string[];
  weight: number;
}

const COUNTRIES: readonly Country[] = [
  { name: 'United States', suffixes: ['com', 'com', 'com', 'io', 'ai', 'co'], cities: ['New York', 'San Francisco', 'Austin', 'Chicago', 'Boston', 'Seattle', 'Denver', 'Atlanta'], weight: 40 },
  { name: 'United Kingdom', suffixes: ['co.uk', 'co.uk', 'com', 'io'], cities: ['London', 'Manchester', 'Edinburgh', 'Bristol', 'Leeds', 'Cambridge'], weight: 14 },
  { name: 'Germany', suffixes: ['de', 'de', 'com'], cities: ['Berlin', 'München', 'Hamburg', 'Köln', 'Frankfurt am Main', 'Stuttgart'], weight: 10 },
  { name: 'Brazil', suffixes: ['com.br', 'com.br', 'com'], cities: ['São Paulo', 'Rio de Janeiro', 'Belo Horizonte', 'Curitiba', 'Porto Alegre'], weight: 8 },
  { name: 'France', suffixes: ['fr', 'fr', 'com', 'io'], cities: ['Paris', 'Lyon', 'Toulouse', 'Nantes', 'Bordeaux'], weight: 6 },
  { name: 'Netherlands', suffixes: ['nl', 'com', 'io'], cities: ['Amsterdam', 'Rotterdam', 'Utrecht', 'Eindhoven'], weight: 5 },
  { name: 'Australia', suffixes: ['com.au', 'com.au', 'io'], cities: ['Sydney', 'Melbourne', 'Brisbane', 'Perth'], weight: 5 },
  { name: 'Canada', suffixes: ['ca', 'com'], cities: ['Toronto', 'Vancouver', 'Montréal', 'Ottawa'], weight: 5 },
  { name: 'Japan', suffixes: ['co.jp', 'jp', 'com'], cities: ['Tokyo', 'Osaka', 'Fukuoka', 'Kyoto'], weight: 4 },
  { name: 'India', suffixes: ['in', 'co.in', 'com'], cities: ['Bengaluru', 'Mumbai', 'Pune', 'Hyderabad', 'Delhi'], weight: 3 },
];

interface Industry {
  canonical: string;
  raw: readonly string[];
  nouns: readonly string[];
  specialties: readonly string[];
}

const INDUSTRIES: readonly Industry[] = [
  { canonical: 'Software Development', raw: ['software', 'SaaS', 'Computer Software', 'software dev'], nouns: ['Labs', 'Software', 'Systems', 'Cloud', 'Apps'], specialties: ['SaaS', 'APIs', 'developer tools', 'data platforms', 'machine learning', 'mobile apps', 'DevOps'] },
  { canonical: 'Financial Services', raw: ['fintech', 'fin tech', 'Banking & Finance', 'financial svcs'], nouns: ['Capital', 'Pay', 'Finance', 'Bank', 'Ledger'], specialties: ['payments', 'lending', 'risk', 'wealth management', 'compliance', 'treasury'] },
  { canonical: 'Logistics & Supply Chain', raw: ['logistics', 'logistics/shipping', 'Transportation/Trucking'], nouns: ['Logistics', 'Freight', 'Shipping', 'Cargo'], specialties: ['last-mile delivery', 'freight forwarding', 'warehousing', 'fleet management', 'customs'] },
  { canonical: 'Retail', raw: ['retail - ecommerce', 'e-commerce', 'Retail Trade'], nouns: ['Goods', 'Market', 'Store', 'Outfitters'], specialties: ['e-commerce', 'omnichannel', 'private label', 'marketplaces', 'subscriptions'] },
  { canonical: 'Healthcare', raw: ['Health Care', 'hospital & health care', 'medical'], nouns: ['Health', 'Care', 'Clinics', 'Medical'], specialties: ['telehealth', 'diagnostics', 'patient engagement', 'clinical trials', 'home care'] },
  { canonical: 'Manufacturing', raw: ['mfg', 'Industrial Manufacturing', 'Maschinenbau'], nouns: ['Industries', 'Works', 'Manufacturing', 'Tools'], specialties: ['CNC machining', 'injection moulding', 'automation', 'precision parts', 'robotics'] },
  { canonical: 'Food & Beverage', raw: ['food', 'F&B', 'Food Production'], nouns: ['Foods', 'Kitchen', 'Brewing', 'Coffee'], specialties: ['organic', 'craft beer', 'plant-based', 'catering', 'specialty coffee'] },
  { canonical: 'Education', raw: ['edtech', 'E-Learning', 'higher ed'], nouns: ['Academy', 'Learning', 'Education', 'School'], specialties: ['online courses', 'tutoring', 'corporate training', 'assessment', 'K-12'] },
  { canonical: 'Media & Entertainment', raw: ['media', 'Entertainment', 'broadcast media'], nouns: ['Media', 'Studios', 'Pictures', 'Records'], specialties: ['streaming', 'podcasts', 'post-production', 'publishing', 'live events'] },
  { canonical: 'Real Estate', raw: ['real estate', 'Property Mgmt', 'proptech'], nouns: ['Properties', 'Realty', 'Estates', 'Homes'], specialties: ['property management', 'commercial leasing', 'residential sales', 'valuation'] },
  { canonical: 'Energy', raw: ['Oil & Energy', 'renewables', 'Utilities'], nouns: ['Energy', 'Power', 'Solar', 'Grid'], specialties: ['solar', 'wind', 'energy storage', 'grid services', 'EV charging'] },
  { canonical: 'Telecommunications', raw: ['telecom', 'Telecoms', 'wireless'], nouns: ['Telecom', 'Networks', 'Connect', 'Mobile'], specialties: ['fibre', '5G', 'VoIP', 'network security', 'IoT connectivity'] },
  { canonical: 'Biotechnology', raw: ['biotech', 'Life Sciences', 'pharma'], nouns: ['Bio', 'Therapeutics', 'Genomics', 'Pharma'], specialties: ['genomics', 'drug discovery', 'biologics', 'gene therapy', 'bioinformatics'] },
  { canonical: 'Marketing & Advertising', raw: ['marketing', 'Ad Agency', 'digital marketing'], nouns: ['Marketing', 'Agency', 'Creative', 'Digital'], specialties: ['SEO', 'performance marketing', 'branding', 'content', 'influencer marketing'] },
  { canonical: 'Construction', raw: ['construction', 'Building Materials', 'civil engineering'], nouns: ['Construction', 'Builders', 'Engineering', 'Structures'], specialties: ['civil works', 'modular building', 'renovation', 'project management'] },
];

const PREFIXES = ['North', 'Blue', 'Silver', 'Bright', 'Iron', 'Cedar', 'Harbor', 'Summit', 'Red', 'Golden', 'Clear', 'Swift', 'Stone', 'Pine', 'River', 'Oak', 'Maple', 'Falcon', 'Atlas', 'Nova', 'Orbit', 'Prairie', 'Copper', 'Lumen', 'Vertex', 'Quartz', 'Cobalt', 'Evergreen', 'Granite', 'Willow', 'Aurora', 'Beacon', 'Crescent', 'Delta', 'Ember', 'Fjord', 'Glacier', 'Horizon', 'Juniper', 'Keystone', 'Lark', 'Meridian', 'Nimbus', 'Onyx', 'Pioneer', 'Quill', 'Raven', 'Sable', 'Tidal', 'Union', 'Vale', 'West', 'Zephyr', 'Alder', 'Birch', 'Coral', 'Dune', 'Echo', 'Flint', 'Grove'];
const ROOTS = ['wind', 'field', 'bridge', 'gate', 'point', 'stone', 'light', 'brook', 'ridge', 'crest', 'haven', 'works', 'line', 'path', 'forge', 'mark', 'port', 'wave', 'peak', 'spring', 'wood', 'star', 'view', 'land', 'shore', 'vale', 'rock', 'bay', 'hill', 'well'];
const GERMAN_NAMES = ['Müller', 'Schäfer', 'Größer', 'Köhler', 'Bäcker', 'Jäger', 'Schröder', 'Krüger', 'Wößner', 'Hübner'];
const BANDS: readonly [number, string][] = [
  [10, '$0-1M'], [50, '$1M-10M'], [200, '$10M-50M'], [500, '$50M-100M'], [2000, '$100M-500M'], [10000, '$500M-1B'], [Infinity, '$1B+'],
];

const slug = (s: string): string =>
  s.toLowerCase().normalize('NFC').replace(/&/g, 'and').replace(/[^\p{L}\p{N}]+/gu, '-').replace(/^-|-$/g, '');

function weightedCountry(): Country {
  const total = COUNTRIES.reduce((n, c) => n + c.weight, 0);
  let r = rand() * total;
  for (const c of COUNTRIES) {
    r -= c.weight;
    if (r < 0) return c;
  }
  return COUNTRIES[0] as Country;
}

type Company = FixtureCompany;

const taken = new Set<string>();
const companies: Company[] = [];

function uniqueName(industry: Industry, country: Country): string {
  for (;;) {
    const base =
      country.name === 'Germany' && chance(0.12)
        ? `${pick(GERMAN_NAMES)} ${pick(industry.nouns)}`
        : `${pick(PREFIXES)}${chance(0.55) ? pick(ROOTS) : ` ${pick(PREFIXES)}`} ${pick(industry.nouns)}`;
    const name = chance(0.2) ? `${base} ${pick(['Inc.', 'Ltd', 'GmbH', 'Group', 'Co.', 'S.A.', 'LLC'])}` : base;
    const key = slug(base);
    if (!taken.has(key)) {
      taken.add(key);
      return name;
    }
  }
}

function domainFor(name: string, suffix: string): string {
  const words = slug(name.replace(/\s(Inc\.|Ltd|GmbH|Group|Co\.|S\.A\.|LLC)$/, '')).split('-');
  const label = chance(0.5) ? words.join('') : words.join('-');
  return domainToASCII(`${label}.${suffix}`);
}

const domains = new Set<string>();
while (companies.length < COMPANY_COUNT) {
  const industry = pick(INDUSTRIES);
  const country = weightedCountry();
  const name = uniqueName(industry, country);
  const domain = domainFor(name, pick(country.suffixes));
  if (domains.has(domain)) continue;
  const aliases: string[] = [];
  if (chance(0.18)) {
    for (const alt of [domainFor(name, pick(['com', 'io', 'net', 'co'])), domain.replace(/\.[^.]+(\.[^.]+)?$/, 'hq.com')]) {
      if (alt !== domain && !domains.has(alt) && !aliases.includes(alt) && chance(0.7)) aliases.push(alt);
    }
  }
  domains.add(domain);
  for (const a of aliases) domains.add(a);

  const employees = Math.round(Math.exp(rand() * Math.log(200000)));
  const band = BANDS.find(([limit]) => employees <= limit)?.[1] ?? '$1B+';
  const specialties = Array.from({ length: int(0, 5) }, () => pick(industry.specialties)).filter((s, i, a) => a.indexOf(s) === i);
  const industryLabel = chance(0.05) ? null : chance(0.25) ? pick(industry.raw) : industry.canonical;
  const year = chance(0.07) ? null : int(1850, 2024);
  const updated = new Date(Date.UTC(2025, 0, 1) + Math.floor(rand() * 680 * 86400) * 1000);
  const city = chance(0.05) ? null : pick(country.cities);
  companies.push({
    domain,
    aliases,
    name,
    website_url: chance(0.03) ? null : `https://${chance(0.6) ? 'www.' : ''}${domain}`,
    description: chance(0.1)
      ? null
      : `${name} provides ${specialties[0] ?? pick(industry.specialties)} for ${pick(['small businesses', 'enterprises', 'consumers', 'public sector', 'retailers', 'developers'])}${city ? ` from ${city}` : ''}.`,
    industry: industryLabel,
    employee_count: chance(0.08) ? null : employees,
    revenue_range: chance(0.15) ? null : band,
    ownership_type: chance(0.1) ? null : employees > 5000 && chance(0.6) ? 'public' : pick(['private', 'private', 'private', 'nonprofit', 'subsidiary']),
    year_founded: year,
    specialties,
    hq_country: chance(0.03) ? null : country.name,
    hq_city: city,
    last_updated: updated.toISOString(),
  });
}

writeFileSync(new URL('../fixtures/companies.jsonl', import.meta.url), companies.map((c) => JSON.stringify(c)).join('\n') + '\n');

/* ---- the demo input: what a real CRM export looks like ---- */
const quote = (s: string): string => (/[",\r\n]/.test(s) ? `"${s.replace(/"/g, '""')}"` : s);
const rows: string[][] = [];
const owners = ['Ana Souza', 'Ben Clarke', 'Chloé Martin', 'Dev Patel', 'Erin O\'Neil', 'Felix Braun'];
const sample = Array.from({ length: 140 }, () => pick(companies));
for (const [i, c] of sample.entries()) {
  const variants = [
    c.domain,
    `https://www.${c.domain}/about`,
    `http://${c.domain.toUpperCase()}`,
    `www.${c.domain}`,
    ` ${c.domain} `,
    `${c.domain}.`,
    `https://${c.domain}:443/contact?ref=crm`,
    `jobs.${c.domain}`,
    `sales@${c.domain}`,
  ];
  const website = c.aliases.length > 0 && chance(0.5) ? pick(c.aliases) : pick(variants);
  const notes = i % 9 === 0 ? `Met at conference.\nFollow up in Q${int(1, 4)}, "warm" lead` : i % 7 === 0 ? 'Key account, renewals, upsell' : '';
  rows.push([String(1000 + i), c.name, website, pick(owners), notes]);
}
// Duplicates under other spellings, companies the service does not hold, and junk.
for (const c of sample.slice(0, 12)) rows.push([String(2000 + rows.length), c.name.toUpperCase(), `https://${c.domain}/`, pick(owners), 'duplicate entry']);
for (const junk of ['', 'N/A', 'localhost', 'co.uk', '192.168.0.10', 'not a website', 'tbd', 'https://', '   ']) {
  rows.push([String(3000 + rows.length), 'Unknown prospect', junk, pick(owners), 'needs research']);
}
for (const unknown of ['quietmeadowbakery.com', 'https://www.zz-unlisted-holdings.co.uk', 'tinyfirm.com.br', 'münchner-bäckerei-unbekannt.de', 'shop.nobody-here.io']) {
  rows.push([String(4000 + rows.length), 'Prospect', unknown, pick(owners), '']);
}
// Shuffle deterministically so duplicates and junk are spread through the file.
for (let i = rows.length - 1; i > 0; i--) {
  const j = Math.floor(rand() * (i + 1));
  [rows[i], rows[j]] = [rows[j] as string[], rows[i] as string[]];
}
const header = ['Account ID', 'Account Name', ' Company Website ', 'Owner', 'Notes'];
const csv = '\ufeff' + [header, ...rows].map((r) => r.map(quote).join(',')).join('\r\n') + '\r\n';
writeFileSync(new URL('../fixtures/companies.csv', import.meta.url), csv);

console.log(`wrote ${companies.length} companies (${domains.size} domains incl. aliases) and ${rows.length} demo rows`);
