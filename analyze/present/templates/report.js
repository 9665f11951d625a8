// The page's own script: no library, nothing fetched.
// 1. A self check a headless browser reads back: the body's data-images-total,
//    data-images-loaded and data-errors say how many images decoded and which script or
//    console errors occurred.
// 2. Sortable tables (click a header: numbers largest first, text A-Z; click again to flip)
//    and a filter box per table that hides the rows not containing its text.
// 3. The URL's hash replays both, e.g. report.html#sort=counts:flop:desc&filter=counts:fc1
//    (a link to a view, and how the tests drive the page).
window.spiketraceErrors = [];
window.addEventListener('error', e => window.spiketraceErrors.push(String(e.message)));
(function () {
  const consoleError = console.error;
  console.error = function (...args) {
    window.spiketraceErrors.push(args.map(String).join(' '));
    consoleError.apply(console, args);
  };
})();

function spiketraceCellKey(row, index) {
  const cell = row.cells[index];
  if (!cell) return '';
  const value = cell.dataset.value;
  return value !== undefined && value !== '' ? Number(value) : cell.textContent.trim().toLowerCase();
}

function spiketraceSort(table, index, descending) {
  const body = table.tBodies[0];
  const rows = Array.from(body.rows);
  rows.sort((a, b) => {
    const x = spiketraceCellKey(a, index), y = spiketraceCellKey(b, index);
    const order = typeof x === 'number' && typeof y === 'number'
      ? x - y : String(x).localeCompare(String(y), undefined, {numeric: true});
    return descending ? -order : order;
  });
  rows.forEach(row => body.appendChild(row));
  Array.from(table.tHead.rows[0].cells).forEach((th, i) =>
    th.setAttribute('aria-sort', i === index ? (descending ? 'descending' : 'ascending') : 'none'));
}

function spiketraceFilter(table, text) {
  const query = text.trim().toLowerCase();
  let shown = 0;
  Array.from(table.tBodies[0].rows).forEach(row => {
    row.hidden = query !== '' && !row.textContent.toLowerCase().includes(query);
    if (!row.hidden) shown += 1;
  });
  const count = document.querySelector('[data-count-for="' + table.id + '"]');
  if (count) count.textContent = query ? shown + ' of ' + table.tBodies[0].rows.length + ' rows' : '';
}

function spiketraceTable(id) {
  const table = document.getElementById(id);
  return table && table.tagName === 'TABLE' && table.tHead && table.tBodies.length ? table : null;
}

function spiketraceSetUp() {
  document.querySelectorAll('table.sortable').forEach(table => {
    if (!table.tHead || !table.tBodies.length) return;
    Array.from(table.tHead.rows[0].cells).forEach((th, index) => {
      th.classList.add('sortable');
      th.setAttribute('aria-sort', 'none');
      th.title = 'sort by ' + th.textContent.trim();
      th.addEventListener('click', () => {
        const state = th.getAttribute('aria-sort');
        const numeric = th.dataset.numeric === 'true';
        const descending = state === 'none' ? numeric : state === 'ascending';
        spiketraceSort(table, index, descending);
      });
    });
  });
  document.querySelectorAll('input.filter').forEach(input => {
    const table = spiketraceTable(input.dataset.filterFor);
    if (table) input.addEventListener('input', () => spiketraceFilter(table, input.value));
  });
  const wanted = new URLSearchParams(window.location.hash.slice(1));
  const sort = wanted.get('sort');
  if (sort) {
    const [id, column, direction] = sort.split(':');
    const table = spiketraceTable(id);
    const th = table && Array.from(table.tHead.rows[0].cells).find(c => c.dataset.column === column);
    if (th) {
      th.click();  // the user's click, replayed: first click, then a second to flip
      if (th.getAttribute('aria-sort') !== (direction === 'asc' ? 'ascending' : 'descending')) th.click();
    }
  }
  const filter = wanted.get('filter');
  if (filter) {
    const [id, ...text] = filter.split(':');
    const input = document.querySelector('input.filter[data-filter-for="' + id + '"]');
    if (input) {
      input.value = text.join(':');
      input.dispatchEvent(new Event('input'));
    }
  }
}

window.addEventListener('DOMContentLoaded', spiketraceSetUp);
window.addEventListener('load', () => {
  const images = Array.from(document.images);
  document.body.dataset.imagesTotal = images.length;
  document.body.dataset.imagesLoaded = images.filter(i => i.complete && i.naturalWidth > 0).length;
  document.body.dataset.errors = window.spiketraceErrors.join(' | ');
});
