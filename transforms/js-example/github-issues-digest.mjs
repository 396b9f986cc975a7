// Example hookgate transform in JavaScript: GitHub `issues` events as one short agent message
// each. Every other event, `ping` included, is skipped (204), so GitHub's delivery log stays
// green. Build: node ../js-sdk/build.mjs github-issues-digest.mjs -o dist/github-issues-digest.wasm

const EXCERPT_CHARS = 500;

/** The default export is what hookgate calls, once per request. */
export default function githubIssuesDigest({ payload, headers }, ctx) {
  const event = headers['x-github-event'];
  if (event !== 'issues') {
    ctx.log('debug', `skipping GitHub event ${event ?? '(none)'}`);
    return null;
  }
  const issue = payload?.issue;
  if (!issue) throw new Error('an issues event without an issue object');
  return { kind: 'agent', name: 'GitHub', message: digest(payload.action, issue, payload.repository) };
}

function digest(action, issue, repository) {
  const where = repository?.full_name ? ` in ${repository.full_name}` : '';
  const lines = [
    `GitHub issue #${issue.number} ${action ?? 'changed'}${where}: ${issue.title ?? '(no title)'}`,
    `By: ${issue.user?.login ?? 'unknown'}`,
    `Labels: ${labelNames(issue.labels) || 'none'}`,
  ];
  const body = excerpt(issue.body);
  if (body) lines.push('', body, '');
  lines.push(`URL: ${issue.html_url ?? '(none)'}`);
  return lines.join('\n');
}

function labelNames(labels) {
  return (labels ?? []).map((label) => (typeof label === 'string' ? label : label?.name)).filter(Boolean).join(', ');
}

/** The body with runs of blank space collapsed, cut at a word boundary near EXCERPT_CHARS. */
function excerpt(text) {
  const flat = (text ?? '').replace(/\s+/g, ' ').trim();
  if (flat.length <= EXCERPT_CHARS) return flat;
  const cut = flat.slice(0, EXCERPT_CHARS);
  const space = cut.lastIndexOf(' ');
  return `${space > EXCERPT_CHARS / 2 ? cut.slice(0, space) : cut}…`;
}
